package h2mux

// The Conn has no clock and no timers: it reads the owner's clock (Config.Now) on each call,
// says when it next needs to be called (Deadline), and does what is due when it is (Tick).

// Deadline returns the owner's time (Config.Now) at which Tick must be called next, or 0 when
// nothing is pending. It changes with every call into the Conn; a shard re-arms its timer
// wheel entry after each.
func (c *Conn) Deadline() int64 {
	if c.err != nil {
		return 0
	}
	d := int64(0)
	at := func(t int64) {
		if d == 0 || t < d {
			d = t
		}
	}
	if c.settingsSentAt != 0 {
		at(c.settingsSentAt + int64(c.cfg.SettingsTimeout))
	}
	if c.pending() > 0 {
		at(c.drainedAt + int64(c.cfg.StallTimeout))
	}
	for _, s := range c.blocked {
		if s.blocked && s.stallSince != 0 {
			at(s.stallSince + int64(c.cfg.StallTimeout))
		}
	}
	for _, s := range c.lingering {
		if !s.released {
			at(s.linger)
		}
	}
	if c.cfg.IdleTimeout > 0 && len(c.streams) == 0 && !c.goAwaySent {
		at(c.idleSince + int64(c.cfg.IdleTimeout))
	}
	if c.cfg.PingAfter > 0 {
		if c.pingSentAt != 0 {
			at(c.pingSentAt + int64(c.cfg.PingTimeout))
		} else {
			at(c.lastRead + int64(c.cfg.PingAfter))
		}
	}
	return d
}

// Tick does what is due at the owner's current time: it ends the connection whose SETTINGS
// went unacknowledged (SETTINGS_TIMEOUT) or whose output did not drain for StallTimeout,
// resets the streams that waited StallTimeout for window (CANCEL, counted against the reset
// budget), starts the graceful close of a connection idle for IdleTimeout, sends a PING
// after PingAfter of silence and ends the connection when nothing answers it in PingTimeout. A non-nil
// error is the connection error that ends the connection.
func (c *Conn) Tick() error {
	if c.err != nil {
		return c.err
	}
	c.enter()
	defer c.leave()
	now := c.now
	if c.settingsSentAt != 0 && now-c.settingsSentAt >= int64(c.cfg.SettingsTimeout) {
		c.ctr.SettingsTimeouts.Add(1)
		return c.fail(ErrCodeSettingsTimeout, "SETTINGS not acknowledged")
	}
	if c.pending() > 0 && now-c.drainedAt >= int64(c.cfg.StallTimeout) {
		c.ctr.OutputStalls.Add(1)
		return c.fail(ErrCodeEnhanceYourCalm, "the client does not read")
	}
	c.endLingering(now)
	c.stalled = c.stalled[:0]
	for _, s := range c.blocked {
		if s.blocked && s.stallSince != 0 && now-s.stallSince >= int64(c.cfg.StallTimeout) {
			c.stalled = append(c.stalled, s)
		}
	}
	for i, s := range c.stalled { // reset apart: ending a stream takes it off c.blocked
		c.stalled[i] = nil
		if s.released {
			continue
		}
		c.ctr.StallResets.Add(1)
		c.endStream(s, ErrCodeCancel)
		c.writeRST(s.id, ErrCodeCancel)
		if err := c.spendReset(); err != nil {
			return err
		}
	}
	if c.cfg.IdleTimeout > 0 && len(c.streams) == 0 && !c.goAwaySent && now-c.idleSince >= int64(c.cfg.IdleTimeout) {
		c.writeGoAway(ErrCodeNo, "idle")
	}
	if c.cfg.PingAfter > 0 {
		switch {
		case c.pingSentAt != 0 && now-c.pingSentAt >= int64(c.cfg.PingTimeout):
			c.ctr.PingTimeouts.Add(1)
			return c.fail(ErrCodeNo, "no answer to PING")
		case c.pingSentAt == 0 && now-c.lastRead >= int64(c.cfg.PingAfter):
			b := c.grow(frameHeaderLen + 8)
			b = appendFrameHeader(b, 8, framePing, 0, 0)
			c.wrote(append(b, "ballast!"...))
			c.pingSentAt = now
		}
	}
	return nil
}
