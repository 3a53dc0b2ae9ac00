// SPDX-License-Identifier: GPL-2.0
/* Ballast's XDP director: balances TCP and UDP flows to a VIP over its real servers in DR, TUN
 * or NAT mode. New flows are placed by the VIP's Maglev table, indexed by the flow hash (the
 * same hash and table as balance.FlowHash and balance.MaglevTable in Go); established flows
 * stay with their real server through the conns LRU. See docs/xdp.md for the policy on every
 * packet that is not balanced. */
#include "common.h"
#include "jhash.h"
#include "maps.h"
#include "csum.h"
#include "parse.h"
#include "dr.h"
#include "tun.h"
#include "nat.h"
#include "nat_tc.h"

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

static __always_inline __u32 flow_hash(struct pkt *p, struct vip_meta *vip)
{
	if (vip->flags & VIP_F_SOURCE_HASH)
		return jhash_1word(bpf_ntohl(p->key.src), FLOW_SEED);
	__u32 ports = (__u32)bpf_ntohs(p->key.sport) << 16 | bpf_ntohs(p->key.dport);
	return jhash_3words(bpf_ntohl(p->key.src), bpf_ntohl(p->key.dst), ports,
			    FLOW_SEED + p->key.proto);
}

/* pick returns the real server for p (0: none) and its ID in *id, and sets *fresh for a new
 * flow. An established flow's entry is written only when its stamp or closing flag changes, so
 * that its cache line is not written from both CPUs on every packet. */
static __always_inline struct real_def *pick(struct pkt *p, struct vip_meta *vip, __u64 now,
					     __u32 *id, __u32 *second, int *fresh)
{
	__u32 closing = (p->tcp_flags & (TCP_FIN | TCP_RST)) ? CONN_F_CLOSING : 0;

	struct conn *c = bpf_map_lookup_elem(&conns, &p->key);
	if (c && c->real_id) {
		*id = c->real_id;
		struct real_def *r = bpf_map_lookup_elem(&reals, id);
		if (r && r->addr && !((r->flags & REAL_F_DOWN) && (vip->flags & VIP_F_DOWN_MOVE))) {
			*second = c->flags >> CONN_SECOND_SHIFT;
			if (c->seen_ns != now)
				c->seen_ns = now;
			if (closing & ~c->flags)
				c->flags |= closing;
			return r;
		}
	}
	if (vip->ring_size == 0)
		return 0;
	__u32 slot = vip->ring_base + flow_hash(p, vip) % vip->ring_size;
	__u32 *rid = bpf_map_lookup_elem(&ring, &slot);
	if (!rid || *rid == 0)
		return 0;
	*id = *rid;
	struct real_def *r = bpf_map_lookup_elem(&reals, id);
	if (!r || !r->addr)
		return 0;
	struct conn nc = {.real_id = *id, .flags = closing, .seen_ns = now};
	/* Picked up established (not a SYN) on a slot that changed: the previous real server may
	 * hold the connection; remember it for second chance. */
	__u32 *sec = bpf_map_lookup_elem(&ring_second, &slot);
	if (sec && *sec && *sec != *id && *sec < (1u << 16) && p->key.proto == IPPROTO_TCP && !(p->tcp_flags & TCP_SYN)) {
		nc.flags |= *sec << CONN_SECOND_SHIFT;
		*second = *sec;
	}
	bpf_map_update_elem(&conns, &p->key, &nc, BPF_ANY);
	*fresh = 1;
	return r;
}

static __always_inline void account(void *map, __u32 id, __u32 len, int fresh, int drop)
{
	struct traffic *t = bpf_map_lookup_elem(map, &id);
	if (!t)
		return;
	t->packets++;
	t->bytes += len;
	t->new_flows += fresh;
	t->drops += drop;
}

SEC("xdp")
int ballast_director(struct xdp_md *ctx)
{
	struct pkt p = {};
	int c = parse(ctx, &p);
	if (c >= 0) {
		count(c);
		return XDP_PASS;
	}

	struct vip_key vk = {.addr = p.key.dst, .port = p.key.dport, .proto = p.key.proto};
	struct vip_meta *vip = bpf_map_lookup_elem(&vips, &vk);
	if (!vip) {
		int act = reply_nat(ctx, &p);
		if (act >= 0)
			return act;
		count(CNT_PASS_NOT_VIP);
		return XDP_PASS;
	}
	if (p.ip->ttl <= 1) {
		count(CNT_PASS_TTL);
		return XDP_PASS;
	}

	__u32 zero = 0;
	struct director_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return XDP_PASS;
	/* A switch floods a frame for a MAC it has forgotten (a lost director's) to every port:
	 * with several active directors, each would forward its copy. Such a frame is not ours. */
	if ((cfg->flags & CFG_F_OWN_MAC) && !mac_eq(p.eth->h_dest, cfg->mac)) {
		count(CNT_PASS_OTHER_HOST);
		return XDP_PASS;
	}
	int fresh = 0;
	__u32 id = 0, second = 0;
	struct real_def *r = pick(&p, vip, cfg->now_ns, &id, &second, &fresh);
	if (!r) {
		account(&vip_stats, vip->id, p.len, 0, 1);
		count(CNT_DROP_NO_REAL);
		return XDP_DROP;
	}
	account(&vip_stats, vip->id, p.len, fresh, 0);
	account(&real_stats, id, p.len, fresh, 0);
	if (fresh && (cfg->flags & CFG_F_FLOW_EVENTS)) {
		struct flow_event ev = {.key = p.key, .real_addr = r->addr};
		if (bpf_ringbuf_output(&flow_events, &ev, sizeof(ev), 0))
			count(CNT_FLOW_EVENT_LOST);
	}

	switch (vip->mode) {
	case MODE_DR:
		if (second && (cfg->flags & CFG_F_SECOND_CHANCE)) {
			struct real_def *r2 = bpf_map_lookup_elem(&reals, &second);
			if (r2 && r2->addr) {
				count(CNT_SECOND_CHANCE);
				return forward_dr_second(&p, r, r2);
			}
		}
		return forward_dr(&p, r, cfg);
	case MODE_TUN:
		return forward_tun(ctx, &p, r, cfg);
	case MODE_NAT:
		return forward_nat(ctx, &p, r);
	}
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
