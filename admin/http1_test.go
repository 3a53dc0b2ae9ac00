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

// TestHTTP1Metrics: every counter of the event-loop HTTP/1 engine (each field of h1.Stats,
// given a value of its own) appears on /metrics as a ballast_http1_* sample with that value,
// read at the scrape: a field added to h1.Stats and not exported fails here.
func TestHTTP1Metrics(t *testing.T) {
	pl, _ := handlerPlane(t, "")
	var st h1.Stats
	v := reflect.ValueOf(&st).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(1001 + i))
	}
	pl.CountHTTP1(func() h1.Stats { return st })
	rec := httptest.NewRecorder()
	pl.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	values := map[string]string{} // value -> sample
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "ballast_http1_") {
			if i := strings.LastIndexByte(line, ' '); i > 0 {
				values[line[i+1:]] = line[:i]
			}
		}
	}
	for i := range v.NumField() {
		want := strconv.Itoa(1001 + i)
		if _, ok := values[want]; !ok {
			t.Errorf("h1.Stats.%s (%s) is not on /metrics", v.Type().Field(i).Name, want)
		}
	}
	for _, want := range []string{
		"ballast_http1_requests_total " + strconv.FormatInt(st.Requests, 10),
		`ballast_http1_events_total{event="tls_refused"} ` + strconv.FormatInt(st.TLSRefused, 10),
		"ballast_http1_connections " + strconv.FormatInt(st.Conns, 10),
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	st.Requests++ // read at each scrape
	rec = httptest.NewRecorder()
	pl.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if b, _ := io.ReadAll(rec.Body); !strings.Contains(string(b), "ballast_http1_requests_total "+strconv.FormatInt(st.Requests, 10)+"\n") {
		t.Error("the second scrape did not read the engine's counters again")
	}
}
