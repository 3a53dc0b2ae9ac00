/* Parsing: Ethernet, IPv4 without options, unfragmented TCP or UDP. Every read is checked
 * against data_end first; anything else is reported as the counter that names why it is not
 * balanced, and the caller passes it to the kernel. */
#ifndef BALLAST_PARSE_H
#define BALLAST_PARSE_H

#include "common.h"

struct pkt {
	struct ethhdr *eth;
	struct iphdr *ip;
	__u16 *l4_check; /* the TCP or UDP checksum field */
	struct flow_key key;
	__u8 tcp_flags;  /* FIN, SYN, RST... of a TCP segment */
	__u32 len;       /* frame length, for byte counters */
};

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04

/* parse_at returns -1 when p describes a TCP or UDP packet over IPv4, else the counter to bump.
 * data..data_end is what the program can read directly; len is the whole frame's length, which
 * is longer for a GSO or GRO packet seen by the tc program (its payload is not linear), so the
 * IPv4 total length is checked against len and only the headers against data_end. */
static __always_inline int parse_at(void *data, void *data_end, __u32 len, struct pkt *p)
{
	p->len = len;
	p->eth = data;
	if ((void *)(p->eth + 1) > data_end)
		return CNT_PASS_TRUNCATED;
	if (p->eth->h_proto != bpf_htons(ETH_P_IP))
		return CNT_PASS_NOT_IPV4;

	struct iphdr *ip = (void *)(p->eth + 1);
	p->ip = ip;
	if ((void *)(ip + 1) > data_end)
		return CNT_PASS_TRUNCATED;
	if (ip->version != 4)
		return CNT_PASS_NOT_IPV4;
	if (ip->ihl < 5)
		return CNT_PASS_TRUNCATED;
	if (ip->ihl > 5)
		return CNT_PASS_IP_OPTIONS;
	__u16 tot = bpf_ntohs(ip->tot_len);
	if (tot < sizeof(*ip) || sizeof(struct ethhdr) + tot > len)
		return CNT_PASS_TRUNCATED;
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
		return CNT_PASS_FRAGMENT;

	void *l4 = (void *)(ip + 1);
	p->key.src = ip->saddr;
	p->key.dst = ip->daddr;
	p->key.proto = ip->protocol;
	p->tcp_flags = 0;
	if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end || sizeof(*ip) + sizeof(*th) > tot || th->doff < 5)
			return CNT_PASS_TRUNCATED;
		p->key.sport = th->source;
		p->key.dport = th->dest;
		p->l4_check = &th->check;
		p->tcp_flags = ((__u8 *)th)[13];
		return -1;
	}
	if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end || sizeof(*ip) + sizeof(*uh) > tot)
			return CNT_PASS_TRUNCATED;
		p->key.sport = uh->source;
		p->key.dport = uh->dest;
		p->l4_check = &uh->check;
		return -1;
	}
	return CNT_PASS_NOT_L4;
}

/* parse reads an XDP frame, which is always linear. */
static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	return parse_at(data, data_end, data_end - data, p);
}

#endif
