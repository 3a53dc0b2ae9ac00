package balance

// sqf is lighttpd's shortest queue first, counting requests in flight rather than open
// connections (lighttpd's own code counted idle keep-alive connections too; the seed describes
// queues of requests). With weights the key is inflight/weight, compared by cross-multiplying.
// Ties go first in, first out: among members with equal keys the one whose count changed
// longest ago wins, starting from the order in which smooth weighted round robin would first
// pick them. With equal weights and equal loads that is exactly round robin.
//
// Pick is O(log n) under the picker's mutex (the loadHeap); it skips tried and Full members by
// searching past them, which costs more only while members are Full. The picker is a Tracker:
// the counter owner must call Update after every change of a backend's count.
func buildSQF(bs []Backend, tier []int, o Options) (Picker, error) {
	return newLoadHeap(bs, tier, o, 0), nil
}
