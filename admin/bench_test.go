package admin

import (
	"net/http/httptest"
	"testing"
	"time"

	"ballast/balance"
)

// BenchmarkReleaseObserver is the cost the metrics add to every request (Release).
func BenchmarkReleaseObserver(b *testing.B) {
	pl, p := handlerPlane(b, "")
	be, err := p.Acquire(0, balance.Tried{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		pl.metrics.release(p, be, 3*time.Millisecond, false)
	}
}

// BenchmarkPoolsAPI is one GET /api/pools of a two-backend pool, what the page polls each second.
func BenchmarkPoolsAPI(b *testing.B) {
	pl, _ := handlerPlane(b, "")
	h := pl.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/pools", nil))
	}
}
