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
	if c.cfg.IdleTimeout > 0 && len(c.streams) == 0 && !c.goAwaySent {
		at(c.idleSince + int64(c.cfg.IdleTimeout))
	}
	return d
}

// Tick does what is due at the owner's current time: it ends the connection whose SETTINGS
// went unacknowledged (SETTINGS_TIMEOUT) or whose output did not drain for StallTimeout,
// resets the streams that waited StallTimeout for window (CANCEL, counted against the reset
// budget), and starts the graceful close of a connection idle for IdleTimeout. A non-nil
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
	return nil
}
