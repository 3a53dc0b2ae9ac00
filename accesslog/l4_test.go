package accesslog

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func l4Entry() *Entry {
	return &Entry{
		Transport: "tcp", Listener: "db", Client: netip.MustParseAddr("192.0.2.7"), ClientPort: 40001,
		Pool: "p", Backend: "pg\n1", BackendAddress: "10.0.0.5:5432", BytesIn: 300, BytesOut: 4000,
		Duration: 2500 * time.Microsecond, Upstream: 500 * time.Microsecond, Retries: 1, Termination: "SD",
	}
}

// TestL4Lines: a connection's line carries its own fields and none of a request's, in both
// formats, with the log-injection escapes of the HTTP lines.
func TestL4Lines(t *testing.T) {
	b := l4Entry().appendJSON(nil, time.Unix(0, 0))
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	want := map[string]any{"transport": "tcp", "listener": "db", "client": "192.0.2.7", "client_port": 40001.0,
		"pool": "p", "backend": "pg\n1", "backend_address": "10.0.0.5:5432", "bytes_in": 300.0, "bytes_out": 4000.0,
		"duration_ms": 2.5, "connect_ms": 0.5, "retries": 1.0, "termination": "SD"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v", k, m[k], v)
		}
	}
	for _, k := range []string{"method", "uri", "status", "user_agent"} {
		if _, ok := m[k]; ok {
			t.Errorf("a connection's JSON line has %s", k)
		}
	}
	c := string(l4Entry().appendCombined(nil, time.Unix(0, 0).UTC()))
	wantC := `192.0.2.7 - - [01/Jan/1970:00:00:00 +0000] "TCP 10.0.0.5:5432 -" - 4000 "-" "-" port=40001 in=300 rt=0.003 ct=0.001 retries=1 listener=db pool=p backend=pg\x0a1 term=SD` + "\n"
	if c != wantC {
		t.Errorf("combined:\n got %q\nwant %q", c, wantC)
	}
	if strings.Count(c, "\n") != 1 {
		t.Errorf("not one line: %q", c)
	}
}
