package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"ballast/lab/backend"
)

func TestBenchCommandJSON(t *testing.T) {
	s, err := backend.Listen("127.0.0.1:0", backend.Config{Name: "bj", Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list := filepath.Join(t.TempDir(), "list")
	if err := os.WriteFile(list, []byte("?ms=0\nms=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	// Flags after the URL are accepted too, as with ab.
	code := runBench([]string{"-k", "-c", "3", "http://" + s.Addr() + "/", "-n", "25", "-R", list, "--json", "-H", "X-A: b"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if strings.Count(out.String(), "\n") != 1 || errb.Len() != 0 {
		t.Errorf("want exactly one line on stdout and nothing on stderr, got %q / %q", out.String(), errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"failed", "max_ms", "non2xx", "p50_ms", "p90_ms", "p99_ms", "requests", "seconds", "split", "throughput_rps", "ttfb_p50_ms"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if m["requests"].(float64) != 25 || m["split"].(map[string]any)["bj"].(float64) != 25 {
		t.Errorf("json %v", m)
	}
	if st := s.Stats(); st.Conns != 3 || st.Completed != 25 {
		t.Errorf("server saw %d connections and %d requests, want 3 and 25", st.Conns, st.Completed)
	}
}

func TestBenchCommandText(t *testing.T) {
	s, err := backend.Listen("127.0.0.1:0", backend.Config{Name: "bt"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	if code := runBench([]string{"-n", "5", "-c", "2", "-t", "30", "http://" + s.Addr() + "/"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, w := range []string{"Complete requests:      5", "Requests per second:", "bt "} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	if st := s.Stats(); st.Conns != 5 {
		t.Errorf("without -k: %d connections, want 5", st.Conns)
	}
}

func TestBenchCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{}, 2},
		{[]string{"http://a/", "http://b/"}, 2},
		{[]string{"-R", "/nonexistent/list", "http://127.0.0.1:1/"}, 1},
		{[]string{"-b", "/nonexistent/body", "http://127.0.0.1:1/"}, 1},
		{[]string{"https://127.0.0.1:1/"}, 1},
		{[]string{"-x", "http://127.0.0.1:1/"}, 2},
	} {
		var out, errb bytes.Buffer
		if code := runBench(tc.args, &out, &errb); code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, errb.String())
		}
	}
}
