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

static __always_inline __u32 flow_hash(struct pkt *p, struct vip_meta *vip)
{
	if (vip->flags & VIP_F_SOURCE_HASH)
		return jhash_1word(bpf_ntohl(p->key.src), FLOW_SEED);
	__u32 ports = (__u32)bpf_ntohs(p->key.sport) << 16 | bpf_ntohs(p->key.dport);
	return jhash_3words(bpf_ntohl(p->key.src), bpf_ntohl(p->key.dst), ports,
			    FLOW_SEED + p->key.proto);
}

/* pick returns the real server for p (0: none) and sets *fresh for a new flow. */
static __always_inline __u32 pick(struct pkt *p, struct vip_meta *vip, int *fresh)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 closing = (p->tcp_flags & (TCP_FIN | TCP_RST)) ? CONN_F_CLOSING : 0;

	struct conn *c = bpf_map_lookup_elem(&conns, &p->key);
	if (c && c->real_id) {
		__u32 id = c->real_id;
		struct real_def *r = bpf_map_lookup_elem(&reals, &id);
		if (r && r->addr && !((r->flags & REAL_F_DOWN) && (vip->flags & VIP_F_DOWN_MOVE))) {
			c->seen_ns = now;
			c->flags |= closing;
			return id;
		}
	}
	if (vip->ring_size == 0)
		return 0;
	__u32 slot = vip->ring_base + flow_hash(p, vip) % vip->ring_size;
	__u32 *id = bpf_map_lookup_elem(&ring, &slot);
	if (!id || *id == 0)
		return 0;
	struct conn nc = {.real_id = *id, .flags = closing, .seen_ns = now};
	bpf_map_update_elem(&conns, &p->key, &nc, BPF_ANY);
	*fresh = 1;
	return nc.real_id;
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

	int fresh = 0;
	__u32 id = pick(&p, vip, &fresh);
	struct real_def *r = id ? bpf_map_lookup_elem(&reals, &id) : 0;
	__u32 zero = 0;
	struct director_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!r || !r->addr || !cfg) {
		account(&vip_stats, vip->id, p.len, 0, 1);
		count(CNT_DROP_NO_REAL);
		return XDP_DROP;
	}
	account(&vip_stats, vip->id, p.len, fresh, 0);
	account(&real_stats, id, p.len, fresh, 0);

	switch (vip->mode) {
	case MODE_DR:
		return forward_dr(&p, r, cfg);
	case MODE_TUN:
		return forward_tun(ctx, &p, r, cfg);
	case MODE_NAT:
		return forward_nat(ctx, &p, r);
	}
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
