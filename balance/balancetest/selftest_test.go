package balancetest

import (
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"ballast/balance"
)

// simple is a deliberately plain picker over one tier, with switches that break one rule each,
// so that the suite can be shown to pass an honest algorithm and to fail broken ones.
type simple struct {
	bs   []balance.Backend
	tier []int
	load balance.Load
	rnd  balance.Rand
	hash bool // rendezvous hashing by ID instead of weighted random

	ignoreTried, ignoreFull, ignoreWeight, spillWhenBusy, hashByPosition, hashByModulo bool
}

func (s *simple) weight(i int) uint64 {
	if s.ignoreWeight {
		return 1
	}
	return uint64(s.bs[i].Weight)
}

func (s *simple) eligible(i int, tried *balance.Tried) (ok, full bool) {
	if !s.ignoreTried && tried.Has(i) {
		return false, false
	}
	if !s.ignoreFull && s.load.Full(i) {
		return false, true
	}
	return true, false
}

func (s *simple) Pick(key uint64, tried balance.Tried) (int, error) {
	switch {
	case s.hashByPosition:
		return s.tier[key%uint64(len(s.tier))], nil
	case s.hashByModulo:
		ids := make([]int, len(s.tier))
		copy(ids, s.tier)
		sort.Slice(ids, func(a, b int) bool { return s.bs[ids[a]].ID < s.bs[ids[b]].ID })
		return ids[key%uint64(len(ids))], nil
	}
	best, bestScore, total, sawFull := -1, 0.0, uint64(0), false
	var cands []int
	for _, i := range s.tier {
		ok, full := s.eligible(i, &tried)
		sawFull = sawFull || full
		if !ok {
			continue
		}
		if s.hash {
			// Weighted rendezvous: score = w / -ln(h), h uniform in (0,1) from (key, ID).
			h := fnv.New64a()
			h.Write([]byte(s.bs[i].ID))
			var kb [8]byte
			for b := range kb {
				kb[b] = byte(key >> (8 * b))
			}
			h.Write(kb[:])
			u := (float64(h.Sum64()>>11) + 0.5) / (1 << 53)
			if score := float64(s.weight(i)) / -math.Log(u); best < 0 || score > bestScore {
				best, bestScore = i, score
			}
			continue
		}
		cands = append(cands, i)
		total += s.weight(i)
	}
	if !s.hash && total > 0 {
		r := s.rnd.Uint64() % total
		for _, i := range cands {
			if w := s.weight(i); r < w {
				return i, nil
			} else {
				r -= w
			}
		}
	}
	if best >= 0 {
		return best, nil
	}
	if sawFull && !s.spillWhenBusy {
		return -1, balance.ErrBusy
	}
	return -1, balance.ErrNoBackend
}

// mutant returns an algorithm built from simple with the given switches.
func mutant(name string, caps balance.Caps, set func(*simple)) balance.Algorithm {
	return balance.Algorithm{Name: name, Caps: caps, Build: func(bs []balance.Backend, tier []int, o balance.Options) (balance.Picker, error) {
		s := &simple{bs: bs, tier: tier, load: o.Load, rnd: o.Rand, hash: caps.NeedsKey}
		if s.rnd == nil {
			s.rnd = globalRand{}
		}
		set(s)
		return s, nil
	}}
}

var mutants = map[string]struct {
	alg      balance.Algorithm
	failedAt string // the subtest that must fail
}{
	"ignores-tried":    {mutant("ignores-tried", balance.Caps{Proportional: true}, func(s *simple) { s.ignoreTried = true }), "/eligibility"},
	"ignores-full":     {mutant("ignores-full", balance.Caps{Proportional: true}, func(s *simple) { s.ignoreFull = true }), "/eligibility"},
	"spills-when-busy": {mutant("spills-when-busy", balance.Caps{Proportional: true}, func(s *simple) { s.spillWhenBusy = true }), "primaries_full"},
	"ignores-weight":   {mutant("ignores-weight", balance.Caps{Proportional: true}, func(s *simple) { s.ignoreWeight = true }), "/weights/1-2-3-4"},
	"hash-by-position": {mutant("hash-by-position", balance.Caps{NeedsKey: true, Proportional: true}, func(s *simple) { s.hashByPosition = true }), "/hash-order"},
	"hash-by-modulo":   {mutant("hash-by-modulo", balance.Caps{NeedsKey: true, Proportional: true}, func(s *simple) { s.hashByModulo = true }), "/hash-disruption"},
}

// TestHonestReference: a plain but correct weighted-random picker and a rendezvous-hash picker
// pass the whole suite, so its tolerances do not reject honest algorithms.
func TestHonestReference(t *testing.T) {
	t.Run("random", func(t *testing.T) {
		Run(t, mutant("reference-random", balance.Caps{Proportional: true}, func(*simple) {}))
	})
	t.Run("rendezvous", func(t *testing.T) {
		Run(t, mutant("reference-rendezvous", balance.Caps{NeedsKey: true, Proportional: true}, func(*simple) {}))
	})
}

// TestMutantsFail runs the suite against each broken picker in a child process (a failing
// *testing.T cannot be contained in-process) and expects the named check to fail.
func TestMutantsFail(t *testing.T) {
	if os.Getenv("BALANCETEST_MUTANT") != "" {
		t.Skip("inside a child")
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestMutantChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "BALANCETEST_MUTANT="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a picker that %s (err %v):\n%s", name, err, out)
			}
			if !failedIn(string(out), m.failedAt) {
				t.Fatalf("the suite failed, but not in a subtest matching %q:\n%s", m.failedAt, out)
			}
		})
	}
}

// TestMutantChild is the child half of TestMutantsFail.
func TestMutantChild(t *testing.T) {
	name := os.Getenv("BALANCETEST_MUTANT")
	if name == "" {
		t.Skip("runs only as a child of TestMutantsFail")
	}
	m := mutants[name]
	t.Run(name, func(t *testing.T) { Run(t, m.alg) })
}

type globalRand struct{}

func (globalRand) Uint64() uint64 { return rand.Uint64() }

// failedIn reports whether the verbose test output shows a failed subtest whose name contains
// part.
func failedIn(out, part string) bool {
	for _, line := range strings.Split(out, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "--- FAIL: ") && strings.Contains(l, part) {
			return true
		}
	}
	return false
}
