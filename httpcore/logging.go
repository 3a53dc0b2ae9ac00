package httpcore

import (
	"net/netip"
	"time"

	"ballast/accesslog"
	"ballast/upstream"
)

// Done is how a request ended, as the engine saw it, for its access-log line.
type Done struct {
	Status   int   // the status the client got (499 when it left first)
	BytesIn  int64 // request body bytes received
	BytesOut int64 // response body bytes sent
	// Pool is set once the request was given to a pool; Backend is the one that answered, or
	// the last one tried.
	Pool    *Pool
	Backend *upstream.Backend
	// Upstream is the time from dispatch to the response headers; 0 when none came.
	Upstream time.Duration
	// Term is the termination state; empty means a normal end ("--").
	Term string
}

// Log writes the request's access-log line when the table logs requests: every request gets
// one, whoever answered it.
func (x *Exchange) Log(req Request, d *Done) {
	var e accesslog.Entry
	if !x.Fill(&e, req, d) {
		return
	}
	if al := x.t.core.access.Load(); al != nil {
		al.Write(&e)
	}
}

// Fill sets e to the request's access-log line, for an engine that writes lines off its own
// goroutine (Core.AccessLog, accesslog.Log.AppendLine); false when the table does not log.
// e's byte slices point into the request and the Exchange.
func (x *Exchange) Fill(e *accesslog.Entry, req Request, d *Done) bool {
	if x.t == nil || !x.t.access {
		return false
	}
	x.fill(e, req)
	e.Status, e.BytesIn, e.BytesOut, e.Upstream = d.Status, d.BytesIn, d.BytesOut, d.Upstream
	if d.Term != "" {
		e.Termination = d.Term
	}
	if d.Pool != nil {
		e.Pool = d.Pool.Name
	}
	if d.Backend != nil {
		e.Backend = d.Backend.ID
	}
	return true
}

// AccessLog is the access log requests are logged to, nil when it is off.
func (c *Core) AccessLog() *accesslog.Log {
	if t := c.table.Load(); t == nil || !t.access {
		return nil
	}
	return c.access.Load()
}

// Entry returns the request's access-log entry as far as the request says it, for an engine
// that writes the line itself later (a tunnel, when it ends: WriteEntry); nil when the table
// does not log. Its byte slices point into the request and the Exchange.
func (x *Exchange) Entry(req Request) *accesslog.Entry {
	if x.t == nil || !x.t.access {
		return nil
	}
	e := new(accesslog.Entry)
	x.fill(e, req)
	if p := x.route.Pool(); p != nil {
		e.Pool = p.Name
	}
	return e
}

func (x *Exchange) fill(e *accesslog.Entry, req Request) {
	*e = accesslog.Entry{
		Listener:    x.l.Conf.Name,
		Client:      x.client,
		Method:      req.Method(),
		URI:         req.Target(),
		Proto:       req.Proto(),
		Host:        req.Host(),
		Duration:    time.Since(x.start),
		Retries:     x.retries,
		RequestID:   x.id,
		TraceID:     x.trace,
		Referer:     req.Peek(keyReferer),
		UserAgent:   req.Peek(keyUserAgent),
		Termination: accesslog.TermNormal,
	}
	if len(x.uri) > 0 {
		e.URI = x.uri // as received, before the rewrite
	}
}

// WriteEntry writes an entry Entry returned, if the access log is still on.
func (c *Core) WriteEntry(e *accesslog.Entry) {
	if e == nil {
		return
	}
	if al := c.access.Load(); al != nil {
		al.Write(e)
	}
}

// LogRefused writes the access-log line of a request an engine refused before it could be
// made into a Request (a head that did not parse: 400, 431, 408), with what is known of it.
func (c *Core) LogRefused(listener string, peer netip.Addr, method, uri, proto []byte, status int, term string) {
	if al := c.AccessLog(); al != nil {
		var e accesslog.Entry
		FillRefused(&e, listener, peer, method, uri, proto, status, term)
		al.Write(&e)
	}
}

// FillRefused sets e to the line LogRefused writes, for an engine that writes it itself.
func FillRefused(e *accesslog.Entry, listener string, peer netip.Addr, method, uri, proto []byte, status int, term string) {
	*e = accesslog.Entry{
		Listener: listener, Client: peer, Method: method, URI: uri, Proto: proto,
		Status: status, Termination: term,
	}
}
