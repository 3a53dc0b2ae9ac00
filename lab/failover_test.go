package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"ballast/director"
)

// TestFailoverQuick runs `ballast lab failover --quick` (the DR, NAT and L7 planes, SIGKILL of
// the master, 100 ms adverts): the backup takes over within the master-down interval and some
// margin, new connections are answered through it, no long-lived DR or NAT flow breaks (flow
// sync, the NAT guard), and the table, JSON and charts come out.
func TestFailoverQuick(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: failover needs root (network namespaces, XDP)")
	}
	d, err := director.New(director.Options{Mode: director.DR, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, TableSize: 7, MaxVIPs: 1, MaxReals: 2, ConnTableSize: 64})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
			t.Skipf("skipping: BPF cannot load here: %v", err)
		}
		t.Fatal(err)
	}
	d.Close()
	rep, err := Run(context.Background(), "failover", Options{Ballast: ballastBin, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	planes := map[string]bool{}
	for _, r := range rep.Failover {
		planes[r.Plane] = true
		if r.Error != "" {
			t.Errorf("%s %s: %s", r.Plane, r.Fault, r.Error)
			continue
		}
		if r.NewMasterS <= 0 || r.NewMasterS > 1.5 || r.FailoverS <= 0 || r.FailoverS > 1.5 {
			t.Errorf("%s: new master after %.3f s, failover %.3f s; want both within 1.5 s of a 361 ms master-down interval", r.Plane, r.NewMasterS, r.FailoverS)
		}
		if r.Requests < 100 || r.LongLived != foLongLived || len(r.Timeline) == 0 {
			t.Errorf("%s: %d requests, %d long-lived flows, %d buckets", r.Plane, r.Requests, r.LongLived, len(r.Timeline))
		}
		if (r.Plane == "dr" || r.Plane == "nat") && (r.Broken != 0 || r.RestoreBroken != 0) {
			t.Errorf("%s: %d long-lived flows broken by the failover, %d by the preemption; want 0", r.Plane, r.Broken, r.RestoreBroken)
		}
		if r.RestoreMasterS < 0 {
			t.Errorf("%s: the old master never took over again", r.Plane)
		}
	}
	if !planes["dr"] || !planes["nat"] || !planes["l7"] {
		t.Errorf("planes run: %v", planes)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "plane  fault") {
		t.Errorf("table: %v\n%s", err, table.String())
	}
	var js map[string]any
	if err := json.Unmarshal(rep.JSON(), &js); err != nil || js["failover"] == nil {
		t.Errorf("JSON: %v %v", err, js)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "timeline-sigkill-100ms.svg")); err != nil {
		t.Errorf("timeline chart: %v", err)
	}
}
