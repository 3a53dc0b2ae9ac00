package balance

import "fmt"

// BuildFunc builds a picker over one tier of a pool: the backends whose indexes are listed in
// tier, every one of them usable (not Down, Weight > 0) and all primaries or all backups.
// The picker returns indexes into bs, never into tier.
type BuildFunc func(bs []Backend, tier []int, o Options) (Picker, error)

// Caps describes what an algorithm needs and promises; config validation and the conformance
// suite read it.
type Caps struct {
	// NeedsKey: the algorithm maps a request key (hash algorithms).
	NeedsKey bool
	// NeedsLoad: the algorithm reads live counters through Options.Load.
	NeedsLoad bool
	// Proportional: over many picks (or keys, or with requests finishing in FIFO order) each
	// backend's share follows its weight. False for bybusyness, where weights only break ties.
	Proportional bool
}

// Algorithm is a registered balancing method.
type Algorithm struct {
	Name    string
	Build   BuildFunc
	Caps    Caps
	Summary string // one line for `ballast check`, docs and error messages
}

// New validates bs and builds a picker with primaries and backups in separate tiers.
func (a Algorithm) New(bs []Backend, o Options) (Picker, error) {
	seen := make(map[string]struct{}, len(bs))
	var primary, backup []int
	for i, b := range bs {
		if b.Weight < 0 {
			return nil, &ConfigError{a.Name, fmt.Sprintf("backend %q has negative weight %d", b.ID, b.Weight)}
		}
		if _, dup := seen[b.ID]; dup {
			return nil, &ConfigError{a.Name, fmt.Sprintf("backend ID %q appears twice", b.ID)}
		}
		seen[b.ID] = struct{}{}
		if !b.usable() {
			continue
		}
		if b.Backup {
			backup = append(backup, i)
		} else {
			primary = append(primary, i)
		}
	}
	if a.Caps.NeedsLoad && o.Load == nil {
		return nil, &ConfigError{a.Name, "needs a Load view of live counters"}
	}
	var p, bp Picker
	var err error
	if len(primary) > 0 {
		if p, err = a.Build(bs, primary, o); err != nil {
			return nil, err
		}
	}
	if len(backup) > 0 {
		if bp, err = a.Build(bs, backup, o); err != nil {
			return nil, err
		}
	}
	switch {
	case p == nil && bp == nil:
		return empty{}, nil
	case bp == nil:
		return p, nil
	case p == nil:
		return bp, nil
	}
	pt, ok1 := p.(Tracker)
	bt, ok2 := bp.(Tracker)
	if ok1 && ok2 {
		return &trackedTiers{tiers{p, bp}, pt, bt}, nil
	}
	return &tiers{p, bp}, nil
}

// empty is the picker of a pool with nothing usable.
type empty struct{}

func (empty) Pick(uint64, Tried) (int, error) { return -1, ErrNoBackend }

// tiers tries the primary tier first and falls back to the backups only when no primary is
// usable; a busy primary tier means queue, not spill.
type tiers struct{ primary, backup Picker }

func (t *tiers) Pick(key uint64, tried Tried) (int, error) {
	i, err := t.primary.Pick(key, tried)
	if err == ErrNoBackend {
		return t.backup.Pick(key, tried)
	}
	return i, err
}

type trackedTiers struct {
	tiers
	pt, bt Tracker
}

// Update forwards to both tiers; each ignores indexes that are not its own.
func (t *trackedTiers) Update(i int, inflight int64) {
	t.pt.Update(i, inflight)
	t.bt.Update(i, inflight)
}

// exhausted returns the error for a tier scan that found no candidate: ErrBusy when some member
// was passed over only because it was full, ErrNoBackend otherwise.
func exhausted(sawFull bool) error {
	if sawFull {
		return ErrBusy
	}
	return ErrNoBackend
}

// LBStatus passes Apache's lbstatus through from whichever tier holds backend i, so the status
// page sees it for bybusyness and swrr pools that have backups too.
func (t *tiers) LBStatus(i int) (int64, bool) {
	for _, p := range [2]Picker{t.primary, t.backup} {
		if r, ok := p.(LBStatusReporter); ok {
			if v, ok := r.LBStatus(i); ok {
				return v, true
			}
		}
	}
	return 0, false
}

// scanTier returns the first eligible member of tier from position start on, wrapping.
func scanTier(tier []int, start int, tried *Tried, load Load) (int, error) {
	sawFull := false
	for k := range tier {
		j := start + k
		if j >= len(tier) {
			j -= len(tier)
		}
		i := tier[j]
		if tried.Has(i) {
			continue
		}
		if load.Full(i) {
			sawFull = true
			continue
		}
		return i, nil
	}
	return -1, exhausted(sawFull)
}
