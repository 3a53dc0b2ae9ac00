package balance

import (
	"math/rand/v2"
	"testing"
)

// TestSWRRLBStatusConserved: Apache's bookkeeping credits every usable worker and debits the
// winner the total, so the credits always sum to zero, and stay within (-W, W).
func TestSWRRLBStatusConserved(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for c := 0; c < 50; c++ {
		ws := rrRandomWeights(rng, 1+rng.IntN(9))
		bs := rrBackends(ws...)
		total := int64(0)
		for _, w := range ws {
			total += int64(w)
		}
		rep := rrBuild(t, "swrr", bs, Options{}).(LBStatusReporter)
		for k := 0; k < 100; k++ {
			if _, err := rep.(Picker).Pick(0, Tried{}); err != nil {
				t.Fatal(err)
			}
			sum := int64(0)
			for i := range bs {
				s, ok := rep.LBStatus(i)
				if !ok {
					t.Fatalf("LBStatus(%d) not found", i)
				}
				if s <= -total || s >= total {
					t.Fatalf("weights %v, pick %d: lbstatus %d outside (-%d, %d)", ws, k, s, total, total)
				}
				sum += s
			}
			if sum != 0 {
				t.Fatalf("weights %v, pick %d: lbstatus sums to %d", ws, k, sum)
			}
		}
	}
}

// TestSWRRSkippedGetNoCredit: tried and full workers accrue no credit (Apache: disabled workers
// do not build up a burst for when they return), and the others share as if they were absent.
func TestSWRRSkippedGetNoCredit(t *testing.T) {
	bs := rrBackends(1, 1, 1, 2)
	load := &rrLoad{full: []bool{false, false, true, false}}
	p := rrBuild(t, "swrr", bs, Options{Load: load})
	rep := p.(LBStatusReporter)
	var tried Tried
	tried.Add(1)
	var got []string
	for k := 0; k < 6; k++ {
		i, err := p.Pick(0, tried)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, bs[i].ID)
		for _, skipped := range []int{1, 2} {
			if s, _ := rep.LBStatus(skipped); s != 0 {
				t.Fatalf("skipped %s has lbstatus %d", bs[skipped].ID, s)
			}
		}
	}
	if want := "d a d d a d"; rrJoin(got) != want {
		t.Errorf("a and d alone: %q, want %q", rrJoin(got), want)
	}
	if _, ok := rep.LBStatus(99); ok {
		t.Errorf("LBStatus of a backend outside the tier reported ok")
	}
}

func rrJoin(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// TestSWRRSmoothWindows: over every period-aligned window of W consecutive picks each backend
// gets exactly its weight (the property nginx documents).
func TestSWRRSmoothWindows(t *testing.T) {
	for _, ws := range [][]int{{5, 1, 1}, {1, 2, 3, 4}, {3, 3}, {7, 1}} {
		bs := rrBackends(ws...)
		total := 0
		for _, w := range ws {
			total += w
		}
		p := rrBuild(t, "swrr", bs, Options{})
		picks := make([]int, 4*total)
		for k := range picks {
			picks[k], _ = p.Pick(0, Tried{})
		}
		for start := 0; start+total <= len(picks); start += total {
			counts := make([]int, len(ws))
			for _, i := range picks[start : start+total] {
				counts[i]++
			}
			for i, w := range ws {
				if counts[i] != w {
					t.Errorf("weights %v, window at %d: %s picked %d times, want %d", ws, start, bs[i].ID, counts[i], w)
				}
			}
		}
	}
}
