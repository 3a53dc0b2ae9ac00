// SPDX-License-Identifier: GPL-2.0
/* The real server's side of TUN mode, for kernels without the ipip module: a tcx ingress
 * program that strips the outer IPv4 header of IPIP packets whose inner destination is one of
 * this real server's VIPs, so the kernel delivers the client's own packet to the VIP on lo.
 * And GLB's second chance for DR (ballast_second_chance): a TCP segment to a VIP that is not a
 * SYN, marked by the director with a second-chance real server (its address in the source MAC,
 * see bpf/common.h), for which this host holds no connection, is passed on to that server. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
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

/* Second chance: the real servers a packet may be passed to (address -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 1024);
} sc_peers SEC(".maps");

enum sc_counter {
	SC_MARKED,  /* marked segments seen */
	SC_LOCAL,   /* ... for a connection this host holds: delivered here */
	SC_PASSED,  /* ... for none: passed to the second-chance server */
	SC_NO_PEER, /* ... naming a server not in sc_peers: delivered here */
	SC_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SC_MAX);
} sc_counters SEC(".maps");

static __always_inline void sc_count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&sc_counters, &c);
	if (v)
		*v += 1;
}

#define SC_MAC0 0x32
#define SC_MAC1 0xc5
#define AF_INET 2

SEC("tc")
int ballast_second_chance(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *th = (void *)(ip + 1);

	if ((void *)(th + 1) > data_end)
		return TC_ACT_OK;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_TCP || ip->ihl != 5)
		return TC_ACT_OK;
	if (eth->h_source[0] != SC_MAC0 || eth->h_source[1] != SC_MAC1 || th->syn)
		return TC_ACT_OK;
	__u32 vip = ip->daddr;
	if (!bpf_map_lookup_elem(&decap_vips, &vip))
		return TC_ACT_OK;
	sc_count(SC_MARKED);
	__u32 second;
	__builtin_memcpy(&second, &eth->h_source[2], 4);
	if (!bpf_map_lookup_elem(&sc_peers, &second)) {
		sc_count(SC_NO_PEER);
		return TC_ACT_OK;
	}
	struct bpf_sock_tuple t = {};
	t.ipv4.saddr = ip->saddr;
	t.ipv4.daddr = ip->daddr;
	t.ipv4.sport = th->source;
	t.ipv4.dport = th->dest;
	struct bpf_sock *sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		__u32 state = sk->state;
		bpf_sk_release(sk);
		if (state != BPF_TCP_LISTEN) {
			sc_count(SC_LOCAL);
			return TC_ACT_OK;
		}
	}
	/* No connection here: the server that held the slot before has it. */
	sc_count(SC_PASSED);
	struct bpf_redir_neigh nh = {.nh_family = AF_INET, .ipv4_nh = second};
	return bpf_redirect_neigh(skb->ifindex, &nh, sizeof(nh), 0);
}

char _license[] SEC("license") = "GPL";
