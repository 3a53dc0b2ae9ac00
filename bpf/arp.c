// SPDX-License-Identifier: GPL-2.0
/* The HA master's ARP responder: a tcx ingress program that answers ARP requests for the
 * addresses the master holds (the arp_addrs map, which the Go side fills while it is master),
 * from the interface's MAC, and passes everything else on. The kernel does not answer for
 * them (they are on lo, or not local at all, with arp_ignore=1 on the interface), so the
 * answers last exactly as long as the program's link, which the Ballast process holds: a
 * master killed with SIGKILL stops answering at once. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ARPHRD_ETHER 1
#define ARPOP_REQUEST 1
#define ARPOP_REPLY 2

struct arp_eth {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

struct arp_config {
	__u8 mac[ETH_ALEN]; /* the interface's MAC, the answers' source */
	__u16 pad;
};

/* Addresses answered for (IPv4, network byte order) -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 1024);
} arp_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct arp_config);
	__uint(max_entries, 1);
} arp_cfg SEC(".maps");

/* [0] requests answered. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} arp_stats SEC(".maps");

SEC("tc")
int ballast_arp(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_ARP))
		return TC_ACT_UNSPEC;
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct arp_eth *arp = (void *)(eth + 1);
	if ((void *)(arp + 1) > data_end)
		return TC_ACT_UNSPEC;
	if (arp->htype != bpf_htons(ARPHRD_ETHER) || arp->ptype != bpf_htons(ETH_P_IP) ||
	    arp->hlen != ETH_ALEN || arp->plen != 4 || arp->op != bpf_htons(ARPOP_REQUEST))
		return TC_ACT_UNSPEC;
	__u32 tpa, spa;
	__builtin_memcpy(&tpa, arp->tpa, 4);
	__builtin_memcpy(&spa, arp->spa, 4);
	/* A gratuitous ARP (an announcement, sender = target) is not a question. */
	if (tpa == spa || !bpf_map_lookup_elem(&arp_addrs, &tpa))
		return TC_ACT_UNSPEC;
	__u32 zero = 0;
	struct arp_config *cfg = bpf_map_lookup_elem(&arp_cfg, &zero);
	if (!cfg)
		return TC_ACT_UNSPEC;

	arp->op = bpf_htons(ARPOP_REPLY);
	__builtin_memcpy(arp->tha, arp->sha, ETH_ALEN);
	__builtin_memcpy(arp->tpa, &spa, 4);
	__builtin_memcpy(arp->sha, cfg->mac, ETH_ALEN);
	__builtin_memcpy(arp->spa, &tpa, 4);
	__builtin_memcpy(eth->h_dest, arp->tha, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->mac, ETH_ALEN);
	__u64 *n = bpf_map_lookup_elem(&arp_stats, &zero);
	if (n)
		*n += 1;
	return bpf_redirect(skb->ifindex, 0);
}

char _license[] SEC("license") = "GPL";
