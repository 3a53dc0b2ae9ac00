package balance

// leastconn is HAProxy's leastconn: the lowest (inflight+1)/weight, cross-multiplied, ties
// first in, first out (HAProxy also rotates among equal keys). One deliberate difference: HAProxy
// keys every idle server 0 whatever its weight (haproxy/haproxy#1099), whereas the +1 here
// applies to idle members too, so the heavier of two idle members is preferred and weights
// matter at low load; that is the rule LVS calls sed (shortest expected delay).
//
// It shares sqf's ordered index (loadHeap): O(log n) per pick under the picker's mutex, and it
// is a Tracker.
func buildLeastConn(bs []Backend, tier []int, o Options) (Picker, error) {
	return newLoadHeap(bs, tier, o, 1), nil
}
