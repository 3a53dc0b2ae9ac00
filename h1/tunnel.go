//go:build linux

package h1

import (
	"time"

	"ballast/evloop"
)

// A protocol switch (Upgrade, 101) turns the exchange into a tunnel: both connections stay on
// the shard and bytes are copied each way a read at a time, with the same backpressure as a
// body (a side that does not take what it is sent stops the other side being read); a FIN is
// passed on as a half-close and the other way keeps flowing; the tunnel ends when both ways
// have ended, or either side fails. The backend counts one request in flight for the
// tunnel's life.

// tunnel sends the 101 with what came behind it and switches the exchange.
func (ex *exchange) tunnel(raw []byte, r *respHead, rest []byte) {
	c, sh := ex.c.(*clientConn), ex.sh // only HTTP/1.1 switches protocols
	ex.resp.started = true
	ex.resp.tunnel = true
	ex.reqDone = true
	sh.st.tunnels.Add(1)
	ex.a.bc.Shard().Stop(&ex.a.bc.timer)
	ex.a.bc.tphase = bNone
	c.disarm()
	ex.rm.reset(raw, r)
	sc := r.scan
	ex.cx.StripHopByHop(&ex.rm, &sc, true, false) // Upgrade stays; the engine writes Connection
	_ = ex.cx.Respond(&ex.msg, &ex.rm, ex.a.b)
	w := ex.rm.render(sh.wbuf[:0], respMode{conn: connUpgrade})
	w = append(w, rest...)
	ex.a.bc.releaseIn()
	sh.wbuf = w
	if !c.write(w, nil) {
		return
	}
	ex.tunnelEvent()
}

func (ex *exchange) tunnelling() bool { return ex.resp.tunnel }

// tunnelEvent moves what both sides have, as far as the other side takes it.
func (ex *exchange) tunnelEvent() {
	c, bc, sh := ex.c.(*clientConn), ex.a.bc, ex.sh
	gen, cgen := bc.gen, c.gen
	rs := &ex.resp
	for progress := true; progress; {
		progress = false
		// Client to backend.
		if len(ex.up) > 0 && bc.Ready&evloop.Writable != 0 {
			n, err := bc.Write(ex.up)
			if err != nil && err != evloop.ErrAgain {
				ex.endTunnel(false)
				return
			}
			ex.up = ex.up[:copy(ex.up, ex.up[n:])]
			if len(ex.up) == 0 {
				sh.s.PutBuf(ex.up)
				ex.up = nil
				if rs.upEOF {
					bc.ShutdownWrite()
				}
			}
			progress = progress || n > 0
		}
		if len(ex.up) == 0 && !rs.upEOF && (len(c.in) > 0 || c.Ready&evloop.Readable != 0) {
			var data []byte
			if len(c.in) > 0 {
				data = c.in
			} else {
				n, err := c.Read(sh.s.Buf())
				switch {
				case err == evloop.ErrAgain:
				case err != nil:
					rs.upEOF = true
					bc.ShutdownWrite()
					progress = true
				default:
					data = sh.s.Buf()[:n]
				}
			}
			if len(data) > 0 {
				n, err := bc.Write(data)
				if err != nil && err != evloop.ErrAgain {
					ex.endTunnel(false)
					return
				}
				if n < len(data) {
					ex.up = append(sh.s.GetBuf(len(data)-n), data[n:]...)
				}
				ex.bodyIn += int64(len(data))
				c.releaseIn()
				progress = true
			}
		}
		// Backend to client (what the client has not taken waits in c.out; its flush calls
		// back here through clientDrained).
		if len(c.out) == 0 && !rs.downEOF && bc.Ready&evloop.Readable != 0 {
			n, err := bc.Read(sh.s.Buf())
			switch {
			case err == evloop.ErrAgain:
			case err != nil:
				rs.downEOF = true
				c.ShutdownWrite()
				progress = true
			default:
				rs.bytesOut += int64(n)
				if !c.write(sh.s.Buf()[:n], nil) || bc.gen != gen || c.gen != cgen {
					return
				}
				progress = true
			}
		}
		if rs.upEOF && rs.downEOF && len(ex.up) == 0 && len(c.out) == 0 {
			ex.endTunnel(true)
			return
		}
	}
}

// endTunnel closes both sides and releases the backend's slot.
func (ex *exchange) endTunnel(clean bool) {
	sh := ex.sh
	sh.st.tunnels.Add(-1)
	ex.resp.tunnel = false
	if a := ex.a; a != nil && a.live {
		b := a.b
		a.drop(nil)
		ex.ps.Release(b, time.Duration(ex.resp.ttfb), 101, false)
	}
	ex.logAccess()
	c := ex.c.(*clientConn)
	c.ex = nil
	ex.gone = true
	ex.freeIfDone()
	_ = clean
	c.close()
}
