package lab

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"ballast/director"
	"ballast/internal/netlab"
)

// TestScaleOutQuick runs `ballast lab scale-out --quick`: three directors behind FRR, a real
// server added on every director and then one director's link cut, with flow sync, with
// second chance and with neither. BFD takes the route out within a second; with sync or second
// chance no long-lived flow breaks and the new connections affected span under 0.5 s; with
// neither some break (the control: Katran's issue 155 happens here); the flows spread over all
// three directors and real servers.
func TestScaleOutQuick(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: scale-out needs root (network namespaces, XDP, FRR)")
	}
	if why := netlab.FRRMissing(); why != "" {
		t.Skip("skipping: " + why)
	}
	d, err := director.New(director.Options{Mode: director.DR, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, TableSize: 7, MaxVIPs: 1, MaxReals: 2, ConnTableSize: 64})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: BPF cannot load here: %v", err)
		}
		t.Fatal(err)
	}
	d.Close()
	rep, err := Run(context.Background(), "scale-out", Options{Ballast: ballastBin, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ScaleOut) != 3 {
		t.Fatalf("%d rows, want 3", len(rep.ScaleOut))
	}
	for _, r := range rep.ScaleOut {
		if r.Error != "" {
			t.Fatalf("%s: %s", soName(r), r.Error)
		}
		if r.Disturbed != "" {
			t.Logf("%s: not judged: %s in %d runs (a loaded machine)", soName(r), r.Disturbed, r.Attempts)
			continue
		}
		if r.RouterS <= 0 || r.RouterS > 1.5 {
			t.Errorf("%s: the router stopped using the lost director after %.3f s; want BFD's ~0.3 s (under 1.5 s)", soName(r), r.RouterS)
		}
		if r.LongLived != soLongLived || r.Requests < 200 {
			t.Errorf("%s: %d long-lived flows, %d new connections", soName(r), r.LongLived, r.Requests)
		}
		for i, n := range r.SpreadDirectors {
			if n == 0 {
				t.Errorf("%s: director %d got no new flow (spread %v): ECMP does not spread", soName(r), i, r.SpreadDirectors)
			}
		}
		for i, n := range r.SpreadReals {
			if n == 0 {
				t.Errorf("%s: real server %d holds no long-lived flow (%v)", soName(r), i, r.SpreadReals)
			}
		}
		if (r.FlowSync || r.SecondChance) && (r.Broken != 0 || r.AffectedS >= 0.5 || r.Failed != 0) {
			t.Errorf("%s: %d broken, %d failed, %.3f s affected; want 0, 0, < 0.5 s", soName(r), r.Broken, r.Failed, r.AffectedS)
		}
		if r.SecondChance && r.SecondChancePassed == 0 {
			t.Errorf("%s: the real servers passed no segment on: second chance did not act", soName(r))
		}
		if r.FlowSync && r.SyncFlowsSent == 0 {
			t.Errorf("%s: the directors sent no flow", soName(r))
		}
		if !r.FlowSync && !r.SecondChance && r.Broken == 0 {
			t.Errorf("%s: no flow broken with neither: the case does not show what sync and second chance close", soName(r))
		}
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "| link | yes | 1 | flow sync |") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	if !strings.Contains(string(rep.JSON()), `"scale_out"`) {
		t.Error("JSON without the scale_out rows")
	}
}
