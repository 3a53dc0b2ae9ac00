package h2mux

import "testing"

func TestGetSmoke(t *testing.T) {
	cl := newClient(t, Config{})
	got := cl.exchange(func() { cl.headers(1, true, getHead...) })
	wantFrames(t, got, "HEADERS 1 :status=200 content-type=text/plain", "DATA 1 5 end")
	t.Log(cl.r.events)
}
