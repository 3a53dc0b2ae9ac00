package l4

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestPersistTable: entries expire, are kept per pool, and the table stays within its bound,
// dropping expired entries to make room.
func TestPersistTable(t *testing.T) {
	tab := newPersistTable(persistShards * 2) // two clients per shard
	a := netip.MustParseAddr("192.0.2.1")
	tab.put("p", a, "b1", 100, 0)
	if id, ok := tab.get("p", a, 99); !ok || id != "b1" {
		t.Fatalf("get before expiry: %q %v", id, ok)
	}
	if _, ok := tab.get("p", a, 100); ok {
		t.Fatal("entry outlived its expiry")
	}
	if _, ok := tab.get("q", a, 0); ok {
		t.Fatal("entry leaked to another pool")
	}
	for i := range 10000 {
		tab.put("p", netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), fmt.Sprint(i), 100, 0)
	}
	if n := tab.len(); n > persistShards*2 {
		t.Fatalf("table holds %d entries, bound %d", n, persistShards*2)
	}
	// Once they have expired, new clients take their place.
	for i := range 10000 {
		tab.put("p", netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)}), "new", 300, 200)
	}
	if id, ok := tab.get("p", netip.AddrFrom4([4]byte{11, 0, 0, 1}), 250); ok && id != "new" {
		t.Fatalf("got %q", id)
	}
	if n := tab.len(); n > persistShards*2 || n < persistShards {
		t.Fatalf("after expiry the table holds %d entries", n)
	}
}
