/* The tc half of NAT: packets of NAT flows that the XDP program passed on unchanged because it
 * could not send them itself (next hop MAC unknown, or larger than the egress MTU: a GSO or GRO
 * packet in generic XDP) are rewritten here, at tcx ingress of the same interface, and sent
 * with bpf_redirect_neigh, which resolves the neighbour and lets the device (or the kernel's GSO)
 * segment. The skb helpers keep the checksums right whatever state the skb's checksum is in
 * (a GSO packet's L4 checksum is partial). Nothing is left to the kernel's forwarding, which
 * drops a reply whose new source (the VIP) is one of the host's own addresses. */
#ifndef BALLAST_NAT_TC_H
#define BALLAST_NAT_TC_H

#include <linux/pkt_cls.h>
#include "common.h"
#include "maps.h"
#include "parse.h"

#define NAT_TC_HDRS (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct tcphdr))
#define IP_CSUM_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, check))
#define IP_TTL_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, ttl))
#define IP_SRC_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, saddr))
#define IP_DST_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, daddr))
#define L4_OFF (ETH_HLEN + sizeof(struct iphdr))

/* nat_tc_send rewrites one address of the skb (the source when src is set) to `to`, decrements
 * the TTL and redirects it towards its next hop. */
static __always_inline int nat_tc_send(struct __sk_buff *skb, struct pkt *p, __u32 to, int src)
{
	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET;
	fib.tos = p->ip->tos;
	fib.l4_protocol = p->key.proto;
	fib.ipv4_src = src ? to : p->key.src;
	fib.ipv4_dst = src ? p->key.dst : to;
	fib.ifindex = skb->ingress_ifindex;
	/* tot_len 0: the helper checks the skb against the egress MTU, GSO packets by their
	 * segments' size. */
	int rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_DIRECT);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		count(CNT_TC_DROP_TOO_BIG);
		return TC_ACT_SHOT;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(CNT_PASS_NO_ROUTE);
		return TC_ACT_UNSPEC;
	}
	__u32 from = src ? p->key.src : p->key.dst;
	__u32 off = src ? IP_SRC_OFF : IP_DST_OFF;
	__u32 l4_csum = L4_OFF + (p->key.proto == IPPROTO_TCP ? __builtin_offsetof(struct tcphdr, check)
							       : __builtin_offsetof(struct udphdr, check));
	__u64 l4_flags = BPF_F_PSEUDO_HDR | sizeof(to);
	if (p->key.proto == IPPROTO_UDP)
		l4_flags |= BPF_F_MARK_MANGLED_0; /* a zero UDP checksum stays "none" */
	if (bpf_l4_csum_replace(skb, l4_csum, from, to, l4_flags) ||
	    bpf_l3_csum_replace(skb, IP_CSUM_OFF, from, to, sizeof(to)) ||
	    bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0))
		return TC_ACT_SHOT;

	__u16 old, new;
	if (bpf_skb_load_bytes(skb, IP_TTL_OFF, &old, sizeof(old)))
		return TC_ACT_SHOT;
	new = old;
	((__u8 *)&new)[0]--; /* ttl, then protocol: the 16-bit word the checksum covers */
	if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old, new, sizeof(new)) ||
	    bpf_skb_store_bytes(skb, IP_TTL_OFF, &new, sizeof(new), 0))
		return TC_ACT_SHOT;

	count(CNT_TC_NAT);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (bpf_skb_store_bytes(skb, 0, fib.dmac, ETH_ALEN, 0) ||
		    bpf_skb_store_bytes(skb, ETH_ALEN, fib.smac, ETH_ALEN, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(fib.ifindex, 0);
	}
	return bpf_redirect_neigh(fib.ifindex, 0, 0, 0);
}

SEC("tc")
int ballast_nat_tc(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_UNSPEC;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	if (data + NAT_TC_HDRS > data_end && skb->len >= NAT_TC_HDRS) {
		/* Headers not all linear: pull them in (at most the shortest TCP packet). */
		if (bpf_skb_pull_data(skb, NAT_TC_HDRS))
			return TC_ACT_UNSPEC;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
	}
	struct pkt p = {};
	if (parse_at(data, data_end, skb->len, &p) >= 0)
		return TC_ACT_UNSPEC;
	if (p.ip->ttl <= 1)
		return TC_ACT_UNSPEC;

	struct vip_key vk = {.addr = p.key.dst, .port = p.key.dport, .proto = p.key.proto};
	struct vip_meta *vip = bpf_map_lookup_elem(&vips, &vk);
	if (vip) {
		if (vip->mode != MODE_NAT)
			return TC_ACT_UNSPEC;
		/* The XDP program placed the flow (and remembered its reply) before passing it. */
		struct conn *c = bpf_map_lookup_elem(&conns, &p.key);
		if (!c || !c->real_id)
			return TC_ACT_UNSPEC;
		__u32 id = c->real_id;
		struct real_def *r = bpf_map_lookup_elem(&reals, &id);
		if (!r || !r->addr)
			return TC_ACT_UNSPEC;
		return nat_tc_send(skb, &p, r->addr, 0);
	}
	struct nat_origin *o = bpf_map_lookup_elem(&nat_replies, &p.key);
	if (!o)
		return TC_ACT_UNSPEC;
	return nat_tc_send(skb, &p, o->vip_addr, 1);
}

#endif
