package accesslog

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/config"
)

func entry() *Entry {
	return &Entry{
		Listener: "web", Client: netip.MustParseAddr("192.0.2.7"), Method: []byte("GET"),
		URI: []byte("/a\"b\x01\xff"), Proto: []byte("HTTP/1.1"), Host: []byte("example.org"),
		Status: 200, BytesIn: 5, BytesOut: 11, Duration: 1500 * time.Microsecond,
		Upstream: time.Millisecond, Pool: "p", Backend: "b1", Retries: 1,
		RequestID: []byte("rid"), UserAgent: []byte(`curl "x"`), Termination: "SD",
	}
}

// TestJSONLine: one valid JSON object per line, control bytes escaped, invalid UTF-8 replaced.
func TestJSONLine(t *testing.T) {
	b := entry().appendJSON(nil, time.Unix(0, 0))
	if b[len(b)-1] != '\n' || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("not one line: %q", b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	want := map[string]any{"listener": "web", "client": "192.0.2.7", "uri": "/a\"b\x01\ufffd", "status": 200.0,
		"bytes_in": 5.0, "bytes_out": 11.0, "duration_ms": 1.5, "upstream_ms": 1.0, "retries": 1.0, "user_agent": `curl "x"`, "termination": "SD"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
}

// TestCombinedLine: the NCSA fields first, quotes and bytes outside printable ASCII escaped as
// nginx does, a missing client as "-".
func TestCombinedLine(t *testing.T) {
	e := entry()
	e.Client = netip.Addr{}
	got := string(e.appendCombined(nil, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	want := `- - - [02/Jan/2026:03:04:05 +0000] "GET /a\"b\x01\xff HTTP/1.1" 200 11 "-" "curl \"x\"" rid=rid in=5 rt=0.002 ut=0.001 retries=1 pool=p backend=b1 term=SD` + "\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestSwitch: Set keeps an unchanged log, replaces a changed one, closes it when off; Reopen
// follows a rotation.
func TestSwitch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	var s Switch
	lc := config.Logging{Access: true}
	lc.AccessFile = path
	if err := s.Set(lc); err != nil {
		t.Fatal(err)
	}
	first := s.Load()
	if err := s.Set(lc); err != nil || s.Load() != first {
		t.Fatalf("unchanged Set replaced the log (%v)", err)
	}
	first.Write(entry())
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	s.Load().Write(entry())
	for _, p := range []string{path, path + ".1"} {
		if b, _ := os.ReadFile(p); strings.Count(string(b), "\n") != 1 {
			t.Errorf("%s holds %q, want one line", p, b)
		}
	}
	lc.AccessFormat = config.AccessCombined
	if err := s.Set(lc); err != nil || s.Load() == first {
		t.Fatalf("a new format kept the old log (%v)", err)
	}
	if err := s.Set(config.Logging{}); err != nil || s.Load() != nil {
		t.Fatalf("access off kept a log (%v)", err)
	}
	lc.AccessFile = filepath.Join(dir, "missing", "x.log")
	if err := s.Set(lc); err == nil {
		t.Fatal("a file that cannot be opened was accepted")
	}
}

// BenchmarkWrite: a line costs no allocation.
func BenchmarkWrite(b *testing.B) {
	lc := config.Logging{Access: true}
	lc.AccessFile = filepath.Join(b.TempDir(), "access.log")
	l, err := Open(lc)
	if err != nil {
		b.Fatal(err)
	}
	e := entry()
	b.ReportAllocs()
	for b.Loop() {
		l.Write(e)
	}
}
