//go:build linux

package h1

import (
	"ballast/config"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAccessLogJSON: one JSON object per request with the fields an operator greps for,
// the request ID being the one the backend and the client saw.
func TestAccessLogJSON(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hello world")) })
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	cfg.Listeners[0].RequestID = true
	cfg.Logging.Access, cfg.Logging.AccessFormat = true, config.AccessJSON
	cfg.Logging.AccessFile = filepath.Join(t.TempDir(), "access.log")
	tp := startProxy(t, cfg)

	const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp, body := get(t, testClient(), "POST", tp.url("/a?b=c"), strings.NewReader("12345"), map[string]string{
		"User-Agent": `curl/8 "quoted"`, "Referer": "http://ref.example/", "Traceparent": trace,
		"X-Request-Id": "client-chosen", // not trusted: replaced
	})
	if string(body) != "hello world" {
		t.Fatalf("body %q", body)
	}
	id := resp.Header.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("response X-Request-Id %q, want 32 hex digits", id)
	}
	got := rec.last(t)
	if g := got.header.Get("X-Request-Id"); g != id {
		t.Errorf("backend got X-Request-Id %q, client %q", g, id)
	}
	if g := got.header.Get("Traceparent"); g != trace {
		t.Errorf("backend got traceparent %q, want it unchanged", g)
	}

	var e map[string]any
	line := readLog(t, cfg.Logging.AccessFile, 1)[0]
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, line)
	}
	want := map[string]any{
		"listener": "web", "client": "127.0.0.1", "method": "POST", "uri": "/a?b=c", "proto": "HTTP/1.1",
		"status": 200.0, "bytes_in": 5.0, "bytes_out": 11.0, "pool": "p", "backend": hostOf(rec.Server),
		"retries": 0.0, "request_id": id, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
		"referer": "http://ref.example/", "user_agent": `curl/8 "quoted"`,
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %#v, want %#v", k, e[k], v)
		}
	}
	if d, _ := e["upstream_ms"].(float64); d <= 0 {
		t.Errorf("upstream_ms = %v, want > 0", e["upstream_ms"])
	}
	if _, err := time.Parse(time.RFC3339, e["time"].(string)); err != nil {
		t.Errorf("time: %v", err)
	}
}

// TestAccessLogCombined: the combined format, then the extra fields; a failed request counts
// its retries and has no upstream time.
func TestAccessLogCombined(t *testing.T) {
	rec := newRecorder(t, nil)
	pc := testPool("p", "roundrobin", deadAddr(t), hostOf(rec.Server))
	cfg := testConfig(pc)
	cfg.Logging.Access, cfg.Logging.AccessFormat = true, config.AccessCombined
	cfg.Logging.AccessFile = filepath.Join(t.TempDir(), "access.log")
	tp := startProxy(t, cfg)
	c := testClient()
	for range 2 { // one of the two starts on the dead backend and is retried
		if resp, _ := get(t, c, "GET", tp.url("/p"), nil, map[string]string{"User-Agent": "ua"}); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	lines := readLog(t, cfg.Logging.AccessFile, 2)
	re := regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w\w\w/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /p HTTP/1\.1" 200 2 "-" "ua" rid=- in=0 rt=\d+\.\d{3} ut=\d+\.\d{3} retries=(\d) pool=p backend=(\S+) term=\S+$`)
	retries := 0
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("line does not match the combined format:\n%s", l)
		}
		if m[2] != hostOf(rec.Server) {
			t.Errorf("backend %s, want the live one", m[2])
		}
		if m[1] == "1" {
			retries++
		}
	}
	if retries != 1 {
		t.Errorf("%d lines with retries=1, want 1:\n%s", retries, strings.Join(lines, "\n"))
	}
}

// TestAccessLogReopen: after the file is renamed (logrotate), Reopen sends new lines to a new
// file at the configured path and the old file keeps the earlier ones.
func TestAccessLogReopen(t *testing.T) {
	rec := newRecorder(t, nil)
	cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
	dir := t.TempDir()
	cfg.Logging.Access, cfg.Logging.AccessFile = true, filepath.Join(dir, "access.log")
	tp := startProxy(t, cfg)
	c := testClient()
	get(t, c, "GET", tp.url("/before"), nil, nil)
	readLog(t, cfg.Logging.AccessFile, 1)
	if err := os.Rename(cfg.Logging.AccessFile, filepath.Join(dir, "access.log.1")); err != nil {
		t.Fatal(err)
	}
	if err := tp.ReopenAccessLog(); err != nil {
		t.Fatal(err)
	}
	get(t, c, "GET", tp.url("/after"), nil, nil)
	now := readLog(t, cfg.Logging.AccessFile, 1)
	old := readLog(t, filepath.Join(dir, "access.log.1"), 1)
	if len(now) != 1 || !strings.Contains(now[0], `"uri":"/after"`) {
		t.Errorf("new file: %q", now)
	}
	if len(old) != 1 || !strings.Contains(old[0], `"uri":"/before"`) {
		t.Errorf("rotated file: %q", old)
	}
}

// TestRequestIDTrust: a trusted proxy's X-Request-Id is kept, anyone else's replaced; a
// malformed traceparent does not reach the backend.
func TestRequestIDTrust(t *testing.T) {
	tests := []struct {
		name, trusted, sentID, traceparent string
		keepID, keepTrace                  bool
	}{
		{"trusted peer keeps its ID", "127.0.0.0/8", "abc-123", "", true, false},
		{"untrusted peer gets a new ID", "10.0.0.0/8", "abc-123", "", false, false},
		{"trusted but unprintable ID", "127.0.0.1", "has space", "", false, false},
		{"valid traceparent passes", "", "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", false, true},
		{"malformed traceparent dropped", "", "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", false, false},
		{"all-zero trace-id dropped", "", "", "00-00000000000000000000000000000000-b7ad6b7169203331-01", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder(t, nil)
			cfg := testConfig(testPool("p", "roundrobin", hostOf(rec.Server)))
			cfg.Listeners[0].RequestID = true
			if tc.trusted != "" {
				cfg.TrustedProxies = []string{tc.trusted}
			}
			tp := startProxy(t, cfg)
			hdr := map[string]string{}
			if tc.sentID != "" {
				hdr["X-Request-Id"] = tc.sentID
			}
			if tc.traceparent != "" {
				hdr["Traceparent"] = tc.traceparent
				hdr["Tracestate"] = "k=v"
			}
			resp, _ := get(t, testClient(), "GET", tp.url("/"), nil, hdr)
			got := rec.last(t).header
			if id := got.Get("X-Request-Id"); (id == tc.sentID) != tc.keepID || id == "" || resp.Header.Get("X-Request-Id") != id {
				t.Errorf("backend X-Request-Id %q, client's %q, response %q; keep=%v", id, tc.sentID, resp.Header.Get("X-Request-Id"), tc.keepID)
			}
			if tc.traceparent != "" {
				if kept := got.Get("Traceparent") == tc.traceparent && got.Get("Tracestate") == "k=v"; kept != tc.keepTrace {
					t.Errorf("traceparent %q tracestate %q reached the backend; want kept=%v", got.Get("Traceparent"), got.Get("Tracestate"), tc.keepTrace)
				}
			}
		})
	}
}
