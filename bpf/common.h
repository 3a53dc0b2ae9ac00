/* Types, constants and counters shared by every part of the director and by the Go loader
 * (bpf2go turns the structs below into Go types). Addresses and ports are kept in network byte
 * order everywhere, as they sit in the packet; only the flow hash converts them. */
#ifndef BALLAST_COMMON_H
#define BALLAST_COMMON_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* FLOW_SEED is balance.FlowSeed: Go and BPF hash a flow the same way. */
#define FLOW_SEED 0x8badf00d

#define AF_INET 2
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#define TUN_TTL 64

enum mode {
	MODE_DR = 1,  /* rewrite the destination MAC, send back out */
	MODE_TUN = 2, /* IPIP-encapsulate to the real server */
	MODE_NAT = 3, /* DNAT to the real server, SNAT replies back to the VIP */
};

/* vip_meta.flags */
#define VIP_F_DOWN_MOVE 1   /* established flows of a down real server are re-picked */
#define VIP_F_SOURCE_HASH 2 /* new flows are placed by client address alone */

/* real_def.flags */
#define REAL_F_DOWN 1 /* health checks say down: no new flows, established per VIP_F_DOWN_MOVE */

/* conn.flags */
#define CONN_F_CLOSING 1 /* a FIN or RST was seen from the client */
/* Bits 16-31 of conn.flags: the second-chance real ID of a flow picked up established on a
 * slot whose real server changed (the slot's previous one), 0 for none. */
#define CONN_SECOND_SHIFT 16

/* Second chance (GLB's): a DR frame of such a flow carries the secondary's address in its
 * source MAC, SC_MAC0:SC_MAC1:a.b.c.d (unicast, locally administered); the real server's
 * program passes the packet to that address when it holds no socket for it (bpf/decap.c). */
#define SC_MAC0 0x32
#define SC_MAC1 0xc5

/* Why a packet was passed to the kernel or dropped without being balanced. The Go side names
 * these in the same order (director/counters.go). */
enum counter {
	CNT_PASS_NOT_IPV4,
	CNT_PASS_TRUNCATED,
	CNT_PASS_IP_OPTIONS,
	CNT_PASS_FRAGMENT,
	CNT_PASS_NOT_L4,
	CNT_PASS_TTL,
	CNT_PASS_NOT_VIP,
	CNT_DROP_NO_REAL,
	CNT_DROP_ENCAP,
	CNT_PASS_NO_NEIGH,
	CNT_PASS_NO_ROUTE,
	CNT_NAT_REPLY,
	CNT_PASS_TOO_BIG,
	CNT_TC_NAT,
	CNT_TC_DROP_TOO_BIG,
	CNT_FLOW_EVENT_LOST,
	CNT_PASS_OTHER_HOST,
	CNT_SECOND_CHANCE,
	CNT_MAX,
};

struct vip_key {
	__u32 addr;
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct vip_meta {
	__u32 id;        /* index into vip_stats */
	__u32 ring_base; /* first slot of this VIP's Maglev table in ring */
	__u32 ring_size; /* 0: no usable real server, drop */
	__u8 mode;
	__u8 flags;
	__u16 pad;
};

struct real_def {
	__u32 addr;
	__u8 mac[6]; /* next hop towards the real server (DR, TUN) */
	__u8 flags;
	__u8 pad;
};

struct flow_key {
	__u32 src;
	__u32 dst;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct conn {
	__u32 real_id;
	__u32 flags;
	__u64 seen_ns;
};

struct nat_origin {
	__u32 vip_addr;
	__u16 vip_port;
	__u16 pad;
};

/* A new flow, as reported to the Go side for flow sync: the client's 5-tuple to the VIP and
 * the real server's address (real IDs are each director's own). */
struct flow_event {
	struct flow_key key;
	__u32 real_addr;
};

struct traffic {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;
	__u64 drops;
};

/* director_config.flags */
#define CFG_F_FLOW_EVENTS 1 /* report every new flow in flow_events (flow sync) */
#define CFG_F_OWN_MAC 2     /* balance only frames sent to the director's own MAC */
#define CFG_F_SECOND_CHANCE 4 /* DR: mark frames of flows with a second-chance real server */

struct director_config {
	__u32 source; /* outer source address of TUN packets */
	__u8 mac[6];  /* the director's own MAC, source of every frame it sends */
	__u16 flags;
	/* now_ns is CLOCK_MONOTONIC as the Go side last published it (at load and every
	 * Options.Interval): flows are stamped with it instead of calling bpf_ktime_get_ns on every
	 * packet, and an established flow's entry is written only when it changes. */
	__u64 now_ns;
};

#endif
