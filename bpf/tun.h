/* TUN: the packet is wrapped in an outer IPv4 header (protocol 4, IPIP) from the director's
 * address to the real server's, which decapsulates it (bpf/decap.c) and answers the client
 * directly. The frame grows by 20 bytes: the path to the real servers needs the room. */
#ifndef BALLAST_TUN_H
#define BALLAST_TUN_H

#include "common.h"
#include "csum.h"
#include "maps.h"

static __always_inline int forward_tun(struct xdp_md *ctx, struct pkt *p, struct real_def *r,
				       struct director_config *cfg)
{
	__u16 inner_len = bpf_ntohs(p->ip->tot_len);
	__u8 tos = p->ip->tos;

	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct iphdr))) {
		count(CNT_DROP_ENCAP);
		return XDP_DROP;
	}
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *outer = (void *)(eth + 1);
	if ((void *)(outer + 1) > data_end) {
		count(CNT_DROP_ENCAP);
		return XDP_DROP;
	}
	__builtin_memcpy(eth->h_dest, r->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->mac, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	outer->version = 4;
	outer->ihl = 5;
	outer->tos = tos;
	outer->tot_len = bpf_htons(inner_len + sizeof(struct iphdr));
	outer->id = 0;
	outer->frag_off = 0;
	outer->ttl = TUN_TTL;
	outer->protocol = IPPROTO_IPIP;
	outer->check = 0;
	outer->saddr = cfg->source;
	outer->daddr = r->addr;
	outer->check = ipv4_csum(outer);
	return XDP_TX;
}

#endif
