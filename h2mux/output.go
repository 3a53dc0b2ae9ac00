package h2mux

// grow makes room for n more bytes at the end of the output and returns it, for the caller
// to append to and hand back to wrote.
func (c *Conn) grow(n int) []byte {
	if c.out == nil && c.cfg.Buffers != nil {
		c.out = c.cfg.Buffers.Get()[:0]
	}
	if c.outOff > 0 && cap(c.out)-len(c.out) < n {
		// Move what is left to the front rather than grow.
		m := copy(c.out, c.out[c.outOff:])
		c.out, c.outOff = c.out[:m], 0
	}
	if cap(c.out)-len(c.out) < n {
		nb := make([]byte, len(c.out), max(2*cap(c.out), len(c.out)+n, 4096))
		copy(nb, c.out)
		if c.cfg.Buffers != nil && c.out != nil {
			c.cfg.Buffers.Put(c.out[:0])
		}
		c.out = nb
	}
	return c.out
}

// wrote installs the output grown by the caller.
func (c *Conn) wrote(b []byte) {
	if c.outOff == len(c.out) {
		c.drainedAt = c.now // the output was empty: its stall clock starts now
	}
	c.queued += uint64(len(b) - len(c.out))
	c.out = b
}

// pending is the number of framed bytes not yet drained.
func (c *Conn) pending() int { return len(c.out) - c.outOff }

// room is how many DATA bytes the output may still take.
func (c *Conn) room() int { return c.cfg.MaxOutput - c.pending() }

// Output returns the bytes framed and not yet drained, to be written to the client. The
// slice is valid until the next call into the Conn.
func (c *Conn) Output() []byte { return c.out[c.outOff:] }

// Advance reports that the first n bytes of Output were written. Streams that waited for
// output room are told they may write (Handler.Writable).
func (c *Conn) Advance(n int) {
	if n <= 0 {
		return
	}
	c.enter()
	defer c.leave()
	n = min(n, c.pending())
	c.outOff += n
	c.drained += uint64(n)
	c.drainedAt = c.now
	if c.drained >= c.ctrlMark {
		c.ctrlQueued = 0
	}
	if c.outOff == len(c.out) {
		c.out, c.outOff = c.out[:0], 0
	}
	if len(c.blocked) > 0 && c.err == nil {
		c.wakeBlocked()
	}
}

// control counts a control frame just queued; too many undrained end the connection.
func (c *Conn) control() error {
	c.ctrlQueued++
	c.ctrlMark = c.queued
	if c.ctrlQueued > c.cfg.MaxQueuedControl {
		c.ctr.ControlFloods.Add(1)
		return c.fail(ErrCodeEnhanceYourCalm, "too many control frames queued")
	}
	return nil
}

// WriteData frames response body bytes of s within the client's stream and connection
// windows and the output's room, and returns how many it took. When it takes less than p,
// the owner keeps the rest and writes it after Handler.Writable. end ends the stream once
// all of p is taken; WriteData(s, nil, true) ends it at any window.
func (c *Conn) WriteData(s *Stream, p []byte, end bool) (int, error) {
	if c.err != nil {
		return 0, ErrConnClosed
	}
	if s.released || s.localDone {
		return 0, ErrStreamClosed
	}
	if !s.headSent {
		return 0, ErrNoHeaders
	}
	c.enter()
	defer c.leave()
	take := int64(len(p))
	take = min(take, s.sendWindow, c.sendWindow, int64(c.room()))
	if take < 0 {
		take = 0
	}
	n := int(take)
	if n < len(p) {
		end = false
	}
	if n == 0 && !end {
		c.block(s)
		return 0, nil
	}
	max := min(c.peerMaxFrame, maxSendFrame)
	out := c.grow(n + (n/max+1)*frameHeaderLen)
	for rest := p[:n]; ; {
		m := min(len(rest), max)
		flags := uint8(0)
		if m == len(rest) && end {
			flags = flagEndStream
		}
		out = appendFrameHeader(out, m, frameData, flags, s.id)
		out = append(out, rest[:m]...)
		rest = rest[m:]
		if len(rest) == 0 {
			break
		}
	}
	c.wrote(out)
	s.sendWindow -= take
	c.sendWindow -= take
	if n < len(p) {
		c.block(s) // after the windows were spent: a stream that used the last of one stalls now
	} else {
		s.stallSince = 0
	}
	if end {
		c.localEnd(s)
	}
	return n, nil
}

// localEnd marks the response of s complete. A stream whose request is still arriving
// lingers for LingerTimeout: the rest of the request is read and dropped here (the connection
// window given back, not the stream's, so the client can send at most a window's worth), and
// what the client sends on it is still checked (trailers without END_STREAM, a window past
// 2^31-1, a length that differs from content-length get their stream errors). A request that
// ends meanwhile ends the stream as usual; else RST_STREAM NO_ERROR then tells the client to
// stop sending it (RFC 9113 §8.1).
func (c *Conn) localEnd(s *Stream) {
	s.localDone = true
	if c.client { // the request is complete: the response may go on
		if s.remoteDone {
			c.release(s)
		}
		return
	}
	if !s.remoteDone && c.cfg.LingerTimeout > 0 {
		s.linger = c.now + int64(c.cfg.LingerTimeout)
		s.User = nil
		c.unlist(s)
		c.creditConn(s.recvHeld) // what the owner held and will not consume
		s.recvHeld = 0
		c.lingering = append(c.lingering, s)
		return
	}
	if !s.remoteDone {
		c.writeRST(s.id, ErrCodeNo)
		s.remoteDone = true
	}
	c.release(s)
}

// endLingering resets the lingering streams whose time is up (NO_ERROR) and forgets the ones
// that ended.
func (c *Conn) endLingering(now int64) {
	for i := 0; i < len(c.lingering); {
		s := c.lingering[i]
		if now < s.linger {
			i++
			continue
		}
		s.remoteDone = true
		c.ctr.LingerResets.Add(1)
		c.writeRST(s.id, ErrCodeNo)
		c.release(s) // takes it off c.lingering
	}
}

// block marks s as waiting for window or output room and lists it (once: s.listed says it
// is on c.blocked).
func (c *Conn) block(s *Stream) {
	s.blocked = true
	if !s.listed {
		s.listed = true
		c.blocked = append(c.blocked, s)
	}
	if s.stallSince == 0 && (s.sendWindow <= 0 || c.sendWindow <= 0) {
		s.stallSince = c.now
	}
}

// unlist takes an ending stream off c.blocked.
func (c *Conn) unlist(s *Stream) {
	if !s.listed {
		return
	}
	s.listed = false
	for i, b := range c.blocked {
		if b == s {
			copy(c.blocked[i:], c.blocked[i+1:])
			c.blocked[len(c.blocked)-1] = nil
			c.blocked = c.blocked[:len(c.blocked)-1]
			return
		}
	}
}

// canWrite reports whether s would get at least a byte out of WriteData.
func (c *Conn) canWrite(s *Stream) bool {
	return c.err == nil && s.sendWindow > 0 && c.sendWindow > 0 && c.room() > 0
}

// wakeBlocked tells the waiting streams that can write now (Handler.Writable), in the
// order they blocked; the others stay listed.
func (c *Conn) wakeBlocked() {
	if c.waking {
		return
	}
	c.waking = true
	list := c.blocked
	c.blocked = c.blockedNext[:0]
	for i, s := range list {
		list[i] = nil
		if s.released || !s.listed {
			continue // ended during this pass (unlist could not see the old list)
		}
		s.listed = false
		if !s.blocked {
			continue // woken since it was listed
		}
		if !c.canWrite(s) {
			c.block(s)
			continue
		}
		s.blocked = false
		s.stallSince = 0
		c.h.Writable(s)
	}
	c.blockedNext = list[:0]
	c.waking = false
}

// Consumed reports that the owner is done with n bytes of the request body of s that Data
// handed it: the window they took is given back to the client (WINDOW_UPDATE once half a
// window is due, for the stream and for the connection).
func (c *Conn) Consumed(s *Stream, n int) {
	if n <= 0 || s.released || c.err != nil {
		return
	}
	c.enter()
	defer c.leave()
	m := min(int64(n), s.recvHeld)
	s.recvHeld -= m
	s.recvAcked += m
	c.recvAcked += m
	c.maybeWindowUpdate(s)
	c.maybeConnWindowUpdate()
}

// creditConn gives n bytes of the connection window back (bytes no stream will consume).
func (c *Conn) creditConn(n int64) {
	if n <= 0 {
		return
	}
	c.recvAcked += n
	c.maybeConnWindowUpdate()
}

func (c *Conn) maybeWindowUpdate(s *Stream) {
	if s.remoteDone || s.recvAcked < int64(c.cfg.StreamWindow)/2 {
		return
	}
	b := c.grow(frameHeaderLen + 4)
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, s.id)
	c.wrote(appendUint32(b, uint32(s.recvAcked)))
	s.recvWindow += s.recvAcked
	s.recvAcked = 0
}

func (c *Conn) maybeConnWindowUpdate() {
	if c.recvAcked < int64(c.cfg.ConnWindow)/2 || c.err != nil {
		return
	}
	b := c.grow(frameHeaderLen + 4)
	b = appendFrameHeader(b, 4, frameWindowUpdate, 0, 0)
	c.wrote(appendUint32(b, uint32(c.recvAcked)))
	c.recvWindow += c.recvAcked
	c.recvAcked = 0
}
