/* NAT: the director rewrites the destination to the real server (and, on the way back, the
 * source to the VIP), routes with bpf_fib_lookup and keeps the reverse mapping in nat_replies.
 * Ports are not changed. A packet XDP cannot send itself, because the kernel does not know its
 * next hop's MAC yet or because it is larger than the egress MTU (a GSO or GRO packet in
 * generic XDP), is passed on unchanged to the tc program (nat_tc.h), which rewrites it with the
 * skb checksum helpers and sends it with bpf_redirect_neigh. It is not rewritten here and left
 * to the kernel's forwarding: a reply rewritten to come from the VIP is dropped by the kernel as
 * a martian when the director's host holds the VIP (as an HA master does), and the L4 checksum
 * of a GSO packet is a partial one (the pseudo-header sum) that RFC 1624's update gets wrong. */
#ifndef BALLAST_NAT_H
#define BALLAST_NAT_H

#include "common.h"
#include "csum.h"
#include "maps.h"
#include "parse.h"

/* nat_rewrite changes one address (the source when src is set, else the destination), routes
 * the result and returns the XDP action. */
static __always_inline int nat_rewrite(struct xdp_md *ctx, struct pkt *p, __u32 to, int src)
{
	struct iphdr *ip = p->ip;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib = {};

	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	fib.tot_len = bpf_ntohs(ip->tot_len);
	fib.ipv4_src = src ? to : ip->saddr;
	fib.ipv4_dst = src ? ip->daddr : to;
	fib.ifindex = ctx->ingress_ifindex;
	/* DIRECT: the main table, not the policy rules, which hold the NAT guard's blackholes
	 * for the kernel's own forwarding (director/guard.go). */
	int rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), BPF_FIB_LOOKUP_DIRECT);

	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH &&
	    rc != BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		count(CNT_PASS_NO_ROUTE);
		return XDP_PASS;
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(CNT_PASS_NO_NEIGH);
		return XDP_PASS;
	}
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		count(CNT_PASS_TOO_BIG);
		return XDP_PASS;
	}
	/* The verifier needs the L4 checksum pointer re-checked after the helper call. */
	if ((void *)(p->l4_check + 1) > data_end)
		return XDP_PASS;
	__u32 from;
	if (src) {
		from = ip->saddr;
		ip->saddr = to;
	} else {
		from = ip->daddr;
		ip->daddr = to;
	}
	csum_replace4(&ip->check, from, to);
	l4_csum_replace4(p->l4_check, p->key.proto, from, to);
	__u16 old = *(__u16 *)&ip->ttl;
	ip->ttl--;
	csum_replace2(&ip->check, old, *(__u16 *)&ip->ttl);
	__builtin_memcpy(p->eth->h_dest, fib.dmac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, fib.smac, ETH_ALEN);
	if (fib.ifindex == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect(fib.ifindex, 0);
}

/* forward_nat sends a client's packet to real server r and remembers how to answer. */
static __always_inline int forward_nat(struct xdp_md *ctx, struct pkt *p, struct real_def *r)
{
	struct flow_key reply = {
		.src = r->addr,
		.dst = p->key.src,
		.sport = p->key.dport,
		.dport = p->key.sport,
		.proto = p->key.proto,
	};
	if (!bpf_map_lookup_elem(&nat_replies, &reply)) {
		struct nat_origin o = {.vip_addr = p->key.dst, .vip_port = p->key.dport};
		bpf_map_update_elem(&nat_replies, &reply, &o, BPF_ANY);
	}
	return nat_rewrite(ctx, p, r->addr, 0);
}

/* reply_nat rewrites a real server's answer to come from the VIP; -1 if p is not one. */
static __always_inline int reply_nat(struct xdp_md *ctx, struct pkt *p)
{
	struct nat_origin *o = bpf_map_lookup_elem(&nat_replies, &p->key);
	if (!o)
		return -1;
	if (p->ip->ttl <= 1) {
		count(CNT_PASS_TTL);
		return XDP_PASS;
	}
	count(CNT_NAT_REPLY);
	return nat_rewrite(ctx, p, o->vip_addr, 1);
}

#endif
