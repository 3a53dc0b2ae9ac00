/* Every map of the director. Sizes here are defaults; the Go loader sets the real ones
 * (Options.MaxVIPs, MaxReals, TableSize, ConnTableSize) before loading. */
#ifndef BALLAST_MAPS_H
#define BALLAST_MAPS_H

#include "common.h"

/* VIP (address, port, protocol) -> its table and mode. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct vip_key);
	__type(value, struct vip_meta);
	__uint(max_entries, 64);
} vips SEC(".maps");

/* All Maglev tables end to end: slot -> stable real ID (0: none). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 64 * 65537);
} ring SEC(".maps");

/* Second chance: slot -> the real ID the slot held before its last change (0: none). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 64 * 65537);
} ring_second SEC(".maps");

/* Stable real ID -> address, next-hop MAC and state. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct real_def);
	__uint(max_entries, 4096);
} reals SEC(".maps");

/* Established flows: 5-tuple -> real. An LRU with one LRU list per CPU
 * (BPF_F_NO_COMMON_LRU), so eviction never takes a lock shared between CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct conn);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
} conns SEC(".maps");

/* NAT reverse direction: reply 5-tuple (real -> client) -> the VIP to answer from. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct nat_origin);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
} nat_replies SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct traffic);
	__uint(max_entries, 64);
} vip_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct traffic);
	__uint(max_entries, 4096);
} real_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, CNT_MAX);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct director_config);
	__uint(max_entries, 1);
} config SEC(".maps");

/* New flows for the Go side (flow sync), when director_config.flags has CFG_F_FLOW_EVENTS. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} flow_events SEC(".maps");

/* Keeps struct flow_event in the object's BTF, for bpf2go's Go type. */
const struct flow_event *unused_flow_event __attribute__((unused));

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
}

#endif
