// Package accesslog writes Ballast's access log: one line per request (HTTP planes) or per
// connection (L4 planes), to a file or stderr, apart from the error log, as JSON or in the
// combined log format.
//
// API: Open opens the log a config.Logging asks for; Log.Write formats one Entry and writes it
// as one line (Entry.Termination is one of the Term constants, termination.go, for the HTTP
// planes); Log.Reopen (SIGUSR1) switches to a new file at the same path after a rotation.
// Switch holds the log of the current configuration across reloads (Set keeps an open log
// when nothing changed, opens the new one before closing the old, closes it when access
// logging is turned off).
//
// Concurrency: every method is safe for concurrent use. Each line is one write(2) on a file
// opened O_APPEND, so lines from concurrent requests never interleave; line buffers are
// pooled, so writing a line allocates nothing.
package accesslog
