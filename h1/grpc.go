//go:build linux

package h1

import (
	"bytes"

	"ballast/httpcore"
)

// gRPC on the shards' HTTP/2 streams: an answer of Ballast's own to a
// gRPC request (content-type application/grpc) is a trailers-only response, HTTP 200 with
// the gRPC status of the HTTP one and its text as grpc-message, never an HTTP error page;
// and a request's grpc-timeout bounds its exchange: past it a request still waiting for its
// response head is answered DEADLINE_EXCEEDED and its backend attempts are cancelled (an
// HTTP/2 backend's stream is reset), one whose response has begun is reset.

// renderGRPC answers a gRPC request with the core's Reply as a gRPC status.
func (st *h2stream) renderGRPC(rp *httpcore.Reply) {
	hb := st.h.mux.Headers(st.s, 200)
	hb.Add("content-type", "application/grpc")
	hb.Add("grpc-status", httpcore.GRPCCode(rp.Status))
	hb.Add("grpc-message", httpcore.GRPCMessage(string(bytes.TrimSpace(rp.Body))))
	st.sendHead(hb, true)
}

// streamDeadline is an h2stream as the Expirer of its grpc-timeout timer.
type streamDeadline h2stream

func (d *streamDeadline) Expire(now int64) {
	st := (*h2stream)(d)
	ex := st.ex
	if !st.inUse || ex == nil {
		return
	}
	h := st.h
	h.c.sh.now = now
	ex.deadlinePassed()
	h.c.sh.runH2()
	h.after()
}

// deadlinePassed ends an exchange whose client's deadline passed.
func (ex *exchange) deadlinePassed() {
	if ex.resp.started {
		ex.resp.term = httpcore.Timeout.Termination()
		ex.c.abort()
		return
	}
	if ex.queued && ex.ticket.Cancel(false) {
		ex.queued = false
		ex.pending--
	}
	ex.dropAll()
	ex.cx.Fail(&httpcore.Outcome{Failure: httpcore.Timeout})
	ex.reply()
}

// brokenStatus ends a gRPC stream whose backend broke off after the response head with a
// gRPC status in trailers (UNAVAILABLE, or DEADLINE_EXCEEDED past its grpc-timeout) instead
// of a reset: the client sees why. Only when nothing waits for the client's
// window (trailers go after the DATA already framed); false: the caller resets.
func (st *h2stream) brokenStatus() bool {
	if len(st.out) > 0 || st.trl != nil || st.ended {
		return false
	}
	code := httpcore.GRPCUnavailable
	if st.expired(st.h.c.sh.now) {
		code = httpcore.GRPCDeadlineExceeded
	}
	hb := st.h.mux.Trailers(st.s)
	hb.Add("grpc-status", code)
	hb.Add("grpc-message", "backend stream broken")
	return hb.Send(true) == nil
}
