package admin

import (
	"io"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"ballast/h1"
)

// TestHTTP2BackendMetrics: every counter of the engine's HTTP/2 backends (each field of
// h1.H2BackendStats and of its Mux, given a value of its own) appears on /metrics as a
// ballast_http2_backend_* sample with that value, read at the scrape: a field added to
// h1.H2BackendStats (or h1.H2MuxStats) and not exported fails here.
func TestHTTP2BackendMetrics(t *testing.T) {
	pl, _ := handlerPlane(t, "")
	var st h1.H2BackendStats
	var fields []string // name of each numbered field
	var set func(v reflect.Value, prefix string)
	set = func(v reflect.Value, prefix string) {
		for i := range v.NumField() {
			f, name := v.Field(i), prefix+v.Type().Field(i).Name
			switch f.Kind() {
			case reflect.Struct:
				set(f, name+".")
			case reflect.Int64:
				f.SetInt(int64(2001 + len(fields)))
				fields = append(fields, name)
			case reflect.Uint64:
				f.SetUint(uint64(2001 + len(fields)))
				fields = append(fields, name)
			default:
				t.Fatalf("h1.H2BackendStats.%s: kind %v, want int64, uint64 or a struct of them", name, f.Kind())
			}
		}
	}
	set(reflect.ValueOf(&st).Elem(), "")
	if len(fields) < 15 {
		t.Fatalf("only %d counters found: %v", len(fields), fields)
	}
	pl.CountHTTP2Backends(func() h1.H2BackendStats { return st })
	scrape := func() string {
		rec := httptest.NewRecorder()
		pl.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	body := scrape()
	values := map[string]string{} // value -> sample
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "ballast_http2_backend_") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				if _, dup := values[line[i+1:]]; dup {
					t.Errorf("two samples with the value %s: %s and %s", line[i+1:], values[line[i+1:]], line[:i])
				}
				values[line[i+1:]] = line[:i]
			}
		}
	}
	for i, name := range fields {
		if _, ok := values[strconv.Itoa(2001+i)]; !ok {
			t.Errorf("h1.H2BackendStats.%s (%d) is not on /metrics", name, 2001+i)
		}
	}
	for _, want := range []string{
		"ballast_http2_backend_streams_total " + strconv.FormatInt(st.Streams, 10),
		"ballast_http2_backend_connections " + strconv.FormatInt(st.Conns, 10),
		"ballast_http2_backend_waiting " + strconv.FormatInt(st.Waiting, 10),
		`ballast_http2_backend_events_total{event="wait_overflow"} ` + strconv.FormatInt(st.Overflows, 10),
		`ballast_http2_backend_events_total{event="malformed_response"} ` + strconv.FormatUint(st.Mux.MalformedResponses, 10),
		"# TYPE ballast_http2_backend_waiting gauge",
		"# TYPE ballast_http2_backend_streams_total counter",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	st.Streams++ // read at each scrape
	if !strings.Contains(scrape(), "ballast_http2_backend_streams_total "+strconv.FormatInt(st.Streams, 10)+"\n") {
		t.Error("the second scrape did not read the engine's counters again")
	}
}

// TestHTTP2BackendMetricsWithoutEngine: a plane given no engine (off Linux) shows no
// ballast_http2_backend_* sample rather than zeros it does not have.
func TestHTTP2BackendMetricsWithoutEngine(t *testing.T) {
	pl, _ := handlerPlane(t, "")
	pl.CountHTTP2Backends(nil)
	rec := httptest.NewRecorder()
	pl.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if b, _ := io.ReadAll(rec.Body); strings.Contains(string(b), "ballast_http2_backend_") {
		t.Errorf("samples without an engine:\n%s", b)
	}
}
