// SPDX-License-Identifier: GPL-2.0
/* The least DR program possible, a measuring reference for the lvs-modes lab (not part of the
 * director): every TCP packet to the VIP's port gets real server 0's MAC as destination and
 * the director's as source and goes back out (XDP_TX). No map, no flow table, no balancing,
 * no counters: its run time per packet in place is what any DR program pays on that machine
 * before it does a DR director's work, the floor under the director's own figure. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Set by the loader before the program is loaded. */
volatile const __u32 least_vip;	 /* network byte order */
volatile const __u16 least_port; /* network byte order */
volatile const __u8 least_real_mac[ETH_ALEN];
volatile const __u8 least_own_mac[ETH_ALEN];

SEC("xdp")
int ballast_least_dr(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *tcp = (void *)(ip + 1);

	if ((void *)(tcp + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_TCP)
		return XDP_PASS;
	if (ip->daddr != least_vip || tcp->dest != least_port)
		return XDP_PASS;
	for (int i = 0; i < ETH_ALEN; i++) {
		eth->h_dest[i] = least_real_mac[i];
		eth->h_source[i] = least_own_mac[i];
	}
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
