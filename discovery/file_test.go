package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ballast/upstream"
)

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as an editor or a config tool does
		t.Fatal(err)
	}
}

// TestFileSource: the file is read when it changes; a bad version keeps the last good set and
// names file:line and the field; it is judged once, not again every interval.
func TestFileSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backends.yaml")
	writeFile(t, path, "backends:\n  - address: 127.0.0.1:8081\n  - {address: 127.0.0.1:8082, weight: 3, backup: true}\n")
	f := &File{Path: path, Max: 10}
	a, err := f.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := backends(a); got != "127.0.0.1:8081/1 127.0.0.1:8082/3/backup" || a.Next != FileInterval {
		t.Errorf("first read: %s next %s", got, a.Next)
	}
	if a, err := f.Fetch(context.Background()); err != nil || !a.Unchanged {
		t.Errorf("unchanged file: %+v %v", a, err)
	}
	writeFile(t, path, "backends:\n  - address: 127.0.0.1:8081\n  - address: 127.0.0.1\n")
	_, err = f.Fetch(context.Background())
	if err == nil || !strings.Contains(err.Error(), path+`:3:14: backends[1].address: "127.0.0.1" is not host:port`) {
		t.Errorf("bad file: %v", err)
	}
	if a, err := f.Fetch(context.Background()); err != nil || !a.Unchanged {
		t.Errorf("the same bad file again: %+v %v, want Unchanged", a, err)
	}
	writeFile(t, path, "backends: []\n")
	if _, err := f.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), ErrEmpty.Error()) {
		t.Errorf("empty file: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Fetch(context.Background()); err == nil {
		t.Error("a missing file is no error")
	}
	if a, err := f.Fetch(context.Background()); err != nil || !a.Unchanged {
		t.Errorf("still missing: %+v %v, want Unchanged", a, err)
	}
	writeFile(t, path, "backends:\n  - address: 127.0.0.1:8083\n")
	if a, err := f.Fetch(context.Background()); err != nil || backends(a) != "127.0.0.1:8083/1" {
		t.Errorf("back again: %s %v", backends(a), err)
	}
}

// TestFileFlood: a file of 100,000 backends is refused without reaching the pool, with a
// clear error, and the last good set stays; the refusal is counted.
func TestFileFlood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backends.yaml")
	writeFile(t, path, "backends:\n  - address: 127.0.0.1:8081\n")
	p := newTestPool(t, 0)
	s := NewSyncer("api", "file", 1000, nil)
	s.SetPool(p)
	f := &File{Path: path, Max: 1000}
	s.PollOnce(context.Background(), f)
	var b strings.Builder
	b.WriteString("backends:\n")
	for i := range 100000 {
		fmt.Fprintf(&b, "  - address: 10.%d.%d.%d:80\n", i>>16, (i>>8)&255, i&255)
	}
	writeFile(t, path, b.String())
	start := time.Now()
	s.PollOnce(context.Background(), f)
	st := s.Status()
	if !st.Stale || !strings.Contains(st.LastError, path) || !(strings.Contains(st.LastError, "at most 1000") || strings.Contains(st.LastError, "more than")) {
		t.Errorf("status after the flood: %+v", st)
	}
	if bs := p.Backends(); len(bs) != 1 || bs[0].ID != "127.0.0.1:8081" {
		t.Errorf("the pool has %d backends after the flood, want the last good one", len(bs))
	}
	t.Logf("a 100,000-backend file (%d bytes) refused in %s: %s", b.Len(), time.Since(start), st.LastError)

	huge := filepath.Join(t.TempDir(), "huge.yaml")
	fh, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if _, err := (&File{Path: huge, Max: 10}).Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a file over MaxFileBytes: %v", err)
	}
}

// TestFilePoll: edits reach the pool within the interval, with the drain rules.
func TestFilePoll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backends.yaml")
	writeFile(t, path, "backends:\n  - address: 127.0.0.1:8081\n  - address: 127.0.0.1:8082\n")
	p := newTestPool(t, 0)
	s := NewSyncer("api", "file", 10, nil)
	s.SetPool(p)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Poll(ctx, &File{Path: path, Max: 10, Interval: 20 * time.Millisecond})
	go s.Run(ctx)
	waitFor(t, func() bool { return len(p.Backends()) == 2 })
	writeFile(t, path, "backends:\n  - address: 127.0.0.1:8081\n")
	waitFor(t, func() bool {
		b := p.Backend("127.0.0.1:8082")
		return b == nil || b.State() == upstream.StateDraining
	})
	waitFor(t, func() bool { return p.Backend("127.0.0.1:8082") == nil })
	if st := s.Status(); st.Drained != 1 || st.Removed != 1 {
		t.Errorf("status %+v", st)
	}
}
