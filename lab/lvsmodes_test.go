package lab

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"ballast/director"
)

// TestLVSModesQuick runs `ballast lab lvs-modes --quick` as root: every mode answers every
// request, balanced modes reach both real servers, the seed's figures sit on the throughput
// rows, and the director's per-request figures say what physics says: in NAT the 20 kB
// responses cross the director, in DR and TUN they do not.
func TestLVSModesQuick(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: lvs-modes needs root (network namespaces, XDP)")
	}
	d, err := director.New(director.Options{Mode: director.DR, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, TableSize: 7, MaxVIPs: 1, MaxReals: 2, ConnTableSize: 64})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: BPF cannot load here: %v", err)
		}
		t.Fatal(err)
	}
	d.Close()
	// Two rounds: the goal modes' throughput runs repeat once more, interleaved.
	rep, err := Run(context.Background(), "lvs-modes", Options{Ballast: ballastBin, Quick: true, Reps: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkShape(t, rep.JSON(), "lvs-modes")
	thr := map[string]Result{}
	rows := map[string]int{}
	for _, r := range rep.Results {
		mode, variant, _ := strings.Cut(r.Algorithm, " (")
		rows[mode]++
		if r.Detail.Failed != 0 || r.Detail.Non2xx != 0 || r.Detail.Requests == 0 || splitSum(r) != r.Detail.Requests {
			t.Errorf("%s: %d requests, %d failed, %d non-2xx, split %v", r.Algorithm, r.Detail.Requests, r.Detail.Failed, r.Detail.Non2xx, r.Split)
		}
		if r.Detail.TTFBP50Ms <= 0 || r.P99Ms < r.P50Ms {
			t.Errorf("%s: TTFB p50 %v, p50 %v, p99 %v", r.Algorithm, r.Detail.TTFBP50Ms, r.P50Ms, r.P99Ms)
		}
		if mode == "xdp-least" && r.Split["real1"] != 0 {
			t.Errorf("%s: split %v, want every request on real server 0", r.Algorithm, r.Split)
		}
		if mode != "direct" && mode != "xdp-least" && (r.Split["real0"] == 0 || r.Split["real1"] == 0) {
			t.Errorf("%s: split %v, want both real servers", r.Algorithm, r.Split)
		}
		if strings.HasPrefix(variant, "-c 500") {
			thr[mode] = r
			if r.Detail.Requests != 3000 {
				t.Errorf("%s: %d requests, want 3000", r.Algorithm, r.Detail.Requests)
			}
		}
	}
	for m := range lvsRoundModes {
		if runs := thr[m].Detail.Runs; len(runs) != 2 {
			t.Errorf("%s: throughput row from %d runs %v, want 2 rounds", m, len(runs), runs)
		}
		note := "rounds: " + m + ": "
		found := false
		for _, n := range rep.Notes {
			if strings.HasPrefix(n, note) && strings.Count(n, "req/s") == 2 && (m == "direct" || strings.Contains(n, "of that round's direct")) {
				found = true
			}
		}
		if !found {
			t.Errorf("no note %q with both rounds: %q", note, rep.Notes)
		}
	}
	if runs := thr["xdp-nat"].Detail.Runs; len(runs) != 1 {
		t.Errorf("xdp-nat: %d runs, want 1 (not a round mode)", len(runs))
	}
	for _, m := range []string{"xdp-dr", "xdp-tun"} {
		if !strings.Contains(strings.Join(rep.Notes, "\n"), "goal "+m+" ≥ 95% of direct: ") || !strings.Contains(strings.Join(rep.Notes, "\n"), "median of 2 interleaved rounds") {
			t.Errorf("no verdict for %s from the rounds: %q", m, rep.Notes)
		}
	}
	if l := thr["xdp-least"].Detail; l.ProgNsPerPacket <= 0 || l.ResponseBytesPerReq > 0.05*20<<10 {
		t.Errorf("xdp-least: %.0f ns per packet, %.0f response bytes through the director per request", l.ProgNsPerPacket, l.ResponseBytesPerReq)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "reference: the least DR program possible") {
		t.Errorf("no note compares the director's program with the least one: %q", rep.Notes)
	}
	for _, m := range []string{"direct", "l7", "xdp-dr", "kernel-fwd", "xdp-least", "xdp-tun", "xdp-nat"} {
		if rows[m] != 3 {
			t.Errorf("mode %s has %d rows, want 2 concurrency steps and the throughput run", m, rows[m])
		}
	}
	if rows["l4"] == 0 && !strings.Contains(strings.Join(rep.Notes, "\n"), "l4:") {
		t.Error("the l4 row is missing and no note says why")
	}
	for m, seed := range map[string]float64{"xdp-dr": 9825.68, "xdp-tun": 9339.80, "xdp-nat": 4448.34} {
		r := thr[m]
		if r.Seed.ThroughputRPS != seed {
			t.Errorf("%s: seed %v, want %v", m, r.Seed.ThroughputRPS, seed)
		}
		// A connection per request: SYN, request, ACKs of the response, FIN, ACK at least.
		if r.Detail.DirectorPacketsPerReq < 4 || r.Detail.DirectorBytesPerReq <= 0 {
			t.Errorf("%s: director %.1f packets, %.0f bytes per request", m, r.Detail.DirectorPacketsPerReq, r.Detail.DirectorBytesPerReq)
		}
	}
	nat, dr, tun := thr["xdp-nat"].Detail.ResponseBytesPerReq, thr["xdp-dr"].Detail.ResponseBytesPerReq, thr["xdp-tun"].Detail.ResponseBytesPerReq
	if nat < 20<<10 {
		t.Errorf("NAT: %.0f response bytes per request crossed the director, want at least the 20 kB page", nat)
	}
	fwd := thr["kernel-fwd"].Detail.ResponseBytesPerReq
	if dr > 0.05*nat || tun > 0.05*nat || fwd > 0.05*nat {
		t.Errorf("response bytes through the director: DR %.0f, TUN %.0f, kernel forwarding %.0f, NAT %.0f per request; only NAT replies may cross it", dr, tun, fwd, nat)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "reference: the director's namespace forwarding in the kernel") {
		t.Errorf("no note compares the XDP modes with kernel forwarding: %q", rep.Notes)
	}
	if l7 := thr["l7"].Detail.ResponseBytesPerReq; l7 < 20<<10 {
		t.Errorf("L7: %.0f response bytes per request through the director's host, want at least the page", l7)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "details.json", "ttfb.svg", "latency.svg", "throughput.svg", "director.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// TestLVSVerdicts: with several rounds every ratio to direct is the median of the rounds'
// paired ratios (not the ratio of the median runs), and program times are the rounds' median
// and range.
func TestLVSVerdicts(t *testing.T) {
	row := func(rps, ns float64) Result {
		r := Result{ThroughputRPS: rps}
		r.Detail.ProgNsPerPacket = ns
		return r
	}
	rounds := map[string][]Result{
		"direct":     {row(1000, 0), row(2000, 0), row(1500, 0)},
		"xdp-dr":     {row(990, 800), row(1800, 900), row(1200, 850)},  // 99, 90, 80 %
		"kernel-fwd": {row(950, 0), row(1900, 0), row(1275, 0)},        // 95, 95, 85 %
		"xdp-least":  {row(1000, 160), row(1700, 200), row(1500, 180)}, // 100, 85, 100 %
	}
	by := map[string]Result{}
	for m, rs := range rounds {
		by[m] = medianRow(m, rs)
	}
	notes := strings.Join(lvsVerdicts(by, rounds, by["direct"].ThroughputRPS), "\n")
	for _, want := range []string{
		"goal xdp-dr ≥ 95% of direct: 90.0%, the median of 3 interleaved rounds' ratios (median runs 1200 vs 1500 req/s): NOT met",
		"the least DR program possible (no map, every flow to real server 0) reaches 100.0% of direct, the median of 3",
		"forwarding in the kernel (no XDP) reaches 95.0% of direct, the median of 3 interleaved rounds' ratios (median runs 1275 vs 1500 req/s); xdp-dr 94.7% of it",
		"goal XDP program ≤ 150 ns per packet in DR: 850 ns (rounds 800–900): NOT met",
		"costs 180 ns (rounds 160–200) per packet in the same place; the director's DR program 670 ns above it",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}
