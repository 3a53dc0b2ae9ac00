package lab

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"ballast/lab/loadgen"
)

// The lab's repeatability: a prediction cannot be closer to one measured run than two measured
// runs of the same row are to each other. Each judged row gets the spread its scenario
// measured (Detail.Spread, in the row's unit, with Detail.SpreadFrom saying how), and a row
// outside the model's range by no more than that spread is reported as within the lab's
// repeatability: a verdict of its own, not "inside" (InRange stays false). The model's range
// is never moved: the band it is judged against with the spread is the range with each end
// moved out by the spread, no more (spreadBand).
//
// The spreads measured:
//   - throughput rows (heterogeneous): the row's own run in two halves of its time, each half's
//     throughput, and |first - second| / sqrt(2): what two whole runs of the row would differ
//     by if the halves' noise is independent (a whole run's figure is the mean of two halves);
//     and the backends' capacities measured alone before and after the rows (the same load
//     twice, minutes apart), as a share of their sum, applied to the row's figure. The larger
//     of the two is the row's spread.
//   - makespan rows (slow-backend, variable-cost): the calibration and the roundrobin row run
//     the same load with the same balancer; when both sent every backend the same requests in
//     the same order, the difference of their makespans is what the same row measures twice,
//     and it is every row's spread (in seconds: these makespans are set by sleeps, so their
//     noise is the delays around them, not a share of them). When the two sent requests
//     differently (the arrival order decides it, which the model draws), no spread is stated.

// halvesSpread is the spread of a throughput row from its own traced run: the responses
// completed in each half of the run's time, as throughputs, and |h1 - h2| / sqrt(2). ok is
// false for a run without a trace of at least two responses.
func halvesSpread(res *loadgen.Result) (spread, h1, h2 float64, ok bool) {
	h := halvesOf(res)
	return h.spread, h.h1, h.h2, h.ok
}

// halves are a run's two halves' throughputs and the spread they give (halvesSpread).
type halves struct {
	spread, h1, h2 float64
	ok             bool
}

func halvesOf(res *loadgen.Result) halves {
	var end int64
	n := 0
	for _, e := range res.Trace {
		if e.OK {
			end = max(end, e.Done)
			n++
		}
	}
	if n < 2 || end <= 0 {
		return halves{}
	}
	mid := end / 2
	var first, second int
	for _, e := range res.Trace {
		switch {
		case !e.OK:
		case e.Done <= mid:
			first++
		default:
			second++
		}
	}
	half := float64(end) / 2 / 1e9
	h1, h2 := float64(first)/half, float64(second)/half
	return halves{math.Abs(h1-h2) / math.Sqrt2, h1, h2, true}
}

// capacitySpread is the share of their sum by which the backends' capacities, each measured
// alone before and after the rows, differ: sum |before - after| / sum max(before, after).
func capacitySpread(before, after map[string]float64) float64 {
	var diff, sum float64
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			continue
		}
		diff += math.Abs(a - b)
		sum += max(a, b)
	}
	if sum <= 0 {
		return 0
	}
	return diff / sum
}

// throughputSpread sets a throughput row's spread from its own run's halves and the
// capacities' share (see above): the larger.
func throughputSpread(row *Result, h halves, capShare float64, before, after map[string]float64) {
	if !h.ok {
		return
	}
	s, h1, h2 := h.spread, h.h1, h.h2
	c := capShare * row.ThroughputRPS
	row.Detail.Spread = max(s, c)
	row.Detail.SpreadFrom = fmt.Sprintf("its run's halves %.1f and %.1f req/s (/sqrt 2: %.1f); the backends alone before and after %s (%.3f%%, %.1f req/s at this row's figure)",
		h1, h2, s, capacityPairs(before, after), 100*capShare, c)
}

// capacityPairs prints each backend's capacity before and after.
func capacityPairs(before, after map[string]float64) string {
	s := ""
	for _, name := range sortedKeys(before) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %.1f then %.1f", name, before[name], after[name])
	}
	return s
}

// sameWork reports whether two runs of one load sent every backend the same requests in the
// same order: by backend, the costs (the URL suffix each request carried, by its index) of
// its responses in the order they were sent.
func sameWork(a, b *loadgen.Result, suffixes []string) bool {
	work := func(r *loadgen.Result) map[string][]int {
		evs := slices.Clone(r.Trace)
		slices.SortStableFunc(evs, func(x, y loadgen.Event) int { return cmp.Compare(x.Sent, y.Sent) })
		out := map[string][]int{}
		for _, e := range evs {
			if !e.OK {
				continue
			}
			c := 0
			if len(suffixes) > 1 {
				c = int(e.Index % int64(len(suffixes)))
			}
			out[e.Backend] = append(out[e.Backend], c)
		}
		return out
	}
	wa, wb := work(a), work(b)
	if len(a.Trace) == 0 || len(wa) != len(wb) {
		return false
	}
	for k, xs := range wa {
		if !slices.Equal(xs, wb[k]) {
			return false
		}
	}
	return true
}

// makespanSpread sets every judged row's spread from two runs of the same row, cal and twin
// (labelled twinLabel), when they sent the same work (sameWork); otherwise it notes why none
// is stated. It returns the note.
func makespanSpread(r *Report, cal, twin *loadgen.Result, twinLabel string, suffixes []string) string {
	if cal == nil || twin == nil {
		return "repeatability: not measured (no second run of a row)"
	}
	if !sameWork(cal, twin, suffixes) {
		return fmt.Sprintf("repeatability: not stated: the calibration (%.3f s) and the %s row (%.3f s), the same load and balancer, sent the backends different requests (arrival order, which the model draws)",
			cal.Seconds, twinLabel, twin.Seconds)
	}
	s := math.Abs(cal.Seconds - twin.Seconds)
	from := fmt.Sprintf("the calibration %.4f s and the %s row %.4f s, the same load, balancer and requests per backend", cal.Seconds, twinLabel, twin.Seconds)
	for i := range r.Results {
		r.Results[i].Detail.Spread = s
		r.Results[i].Detail.SpreadFrom = from
	}
	return fmt.Sprintf("repeatability: %.4f s (%s), every row's spread", s, from)
}

// spreadBand is the band a row is judged against with its spread: the model's range with each
// end moved out by the spread, no more.
func spreadBand(rg [2]float64, spread float64) [2]float64 {
	return [2]float64{rg[0] - spread, rg[1] + spread}
}
