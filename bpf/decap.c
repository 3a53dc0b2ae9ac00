// SPDX-License-Identifier: GPL-2.0
/* The real server's side of TUN mode, for kernels without the ipip module: a tcx ingress
 * program that strips the outer IPv4 header of IPIP packets whose inner destination is one of
 * this real server's VIPs, so the kernel delivers the client's own packet to the VIP on lo. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* The VIPs this real server serves (address, network byte order) -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 256);
} decap_vips SEC(".maps");

SEC("tc")
int ballast_decap(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *outer = (void *)(eth + 1);
	struct iphdr *inner = (void *)(outer + 1);

	if ((void *)(inner + 1) > data_end)
		return TC_ACT_OK;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || outer->protocol != IPPROTO_IPIP || outer->ihl != 5)
		return TC_ACT_OK;
	__u32 vip = inner->daddr;
	if (!bpf_map_lookup_elem(&decap_vips, &vip))
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -(int)sizeof(struct iphdr), BPF_ADJ_ROOM_MAC, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
