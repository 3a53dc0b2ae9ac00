package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"ballast/lab/backend"
)

func TestBackendCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--dist", "pareto", "--listen", "127.0.0.1:0"}, 1, "unknown distribution"},
		{[]string{"--ports", "9-8"}, 1, "port range"},
		{[]string{"--error-rate", "2", "--listen", "127.0.0.1:0"}, 1, "rates"},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"--nope"}, 2, "not defined"},
		{[]string{"-h"}, 0, "-workers K"},
	} {
		var out, errb bytes.Buffer
		stop := make(chan struct{})
		close(stop)
		code := serveBackend(tc.args, &out, &errb, stop, nil)
		if code != tc.code || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.msg)
		}
	}
}

func TestBackendCommandServes(t *testing.T) {
	var out, errb bytes.Buffer
	stop := make(chan struct{})
	addr := make(chan string, 1)
	done := make(chan int, 1)
	go func() {
		done <- serveBackend([]string{"--listen", "127.0.0.1:0", "--name", "cli", "--workers", "3", "--service", "1ms", "--body", "10", "--dist", "exp"},
			&out, &errb, stop, func(s *backend.Server) { addr <- s.Addr() })
	}()
	var a string
	select {
	case a = <-addr:
	case code := <-done:
		t.Fatalf("backend exited %d: %s", code, errb.String())
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + a + "/?ms=1")
	if err != nil {
		close(stop)
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	close(stop)
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	if resp.Header.Get("X-Backend-Name") != "cli" || len(body) != 10 {
		t.Errorf("name %q, body %d bytes", resp.Header.Get("X-Backend-Name"), len(body))
	}
	if !strings.Contains(out.String(), "listening on "+a) || !strings.Contains(out.String(), "1 requests") {
		t.Errorf("stdout %q", out.String())
	}
}
