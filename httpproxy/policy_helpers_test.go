package httpproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// seen is what a recorder backend received in one request.
type seen struct {
	method, uri string
	header      http.Header
	body        []byte
}

// recorder is a backend that remembers every request it got and answers with the handler's
// response (200 "ok" when nil).
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecorder(t testing.TB, h http.HandlerFunc) *recorder {
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen{r.Method, r.RequestURI, r.Header.Clone(), body})
		rec.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(rec.Server.Close)
	return rec
}

// last is the last request the backend received.
func (rec *recorder) last(t testing.TB) seen {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("the backend received no request")
	}
	return rec.reqs[len(rec.reqs)-1]
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}
