package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"ballast/config"
)

// NotifySignals starts catching the signals Run handles. Call it before Start, so that a
// signal sent as soon as the first request is answered is never lost to the default action
// (which would kill the process without draining).
func NotifySignals() chan os.Signal {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	return sigs
}

// NewLogger builds the error log; the level can change on reload, the format cannot.
func NewLogger(w io.Writer, lc config.Logging) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(SlogLevel(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), level
	}
	return slog.New(slog.NewTextHandler(w, opts)), level
}

// SlogLevel maps logging.level to a slog level.
func SlogLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Run handles signals (from NotifySignals) until a shutdown and returns the exit code:
// SIGHUP reloads, SIGUSR1 reopens the log files (rotation, as nginx does), SIGTERM or SIGINT
// shuts down with grace for in-flight work (a second one stops waiting), and a failing
// listener shuts down with exit code 1.
func (s *Server) Run(sigs <-chan os.Signal, grace time.Duration) int {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				_ = s.Reload()
				continue
			}
			if sig == syscall.SIGUSR1 {
				s.reopenLogs()
				continue
			}
			return s.shutdownOn(sig, grace, sigs)
		case err := <-s.serveErr:
			s.logger.Error("listener failed; shutting down", "error", err)
			s.shutdownOn(nil, grace, sigs)
			return 1
		}
	}
}

// shutdownOn runs Shutdown bounded by grace and returns 0 when everything finished in time.
func (s *Server) shutdownOn(sig os.Signal, grace time.Duration, sigs <-chan os.Signal) int {
	if sig != nil {
		s.logger.Info("shutting down: no new connections, waiting for in-flight requests", "signal", sig.String(), "grace", grace.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			if sig != syscall.SIGHUP && sig != syscall.SIGUSR1 {
				s.logger.Warn("second signal: not waiting any longer", "signal", sig.String())
				cancel()
			}
		case <-ctx.Done():
		}
	}()
	if err := s.Shutdown(ctx); err != nil {
		s.logger.Error("in-flight requests did not finish in time", "error", err)
		return 1
	}
	s.logger.Info("stopped")
	return 0
}

// logReopener is a plane that writes log files of its own (the HTTP plane's access log).
type logReopener interface{ ReopenLogs() error }

// reopenLogs reopens every plane's log files, so that a rotated file is let go.
func (s *Server) reopenLogs() {
	for _, p := range s.planes {
		if r, ok := p.(logReopener); ok {
			if err := r.ReopenLogs(); err != nil {
				s.logger.Error("log file not reopened", "plane", p.Name(), "error", err)
			}
		}
	}
}
