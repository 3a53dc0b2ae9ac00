/* Internet checksums: a full IPv4 header sum for the TUN outer header, and RFC 1624
 * incremental updates for NAT. All words are read from memory as they lie; the one's
 * complement sum does not depend on byte order as long as every word is read the same way. */
#ifndef BALLAST_CSUM_H
#define BALLAST_CSUM_H

#include "common.h"

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* ipv4_csum sums a 20-byte header whose check field is zero. */
static __always_inline __u16 ipv4_csum(struct iphdr *ip)
{
	__u16 *w = (__u16 *)ip;
	__u32 s = 0;
#pragma clang loop unroll(full)
	for (int i = 0; i < 10; i++)
		s += w[i];
	return csum_fold(s);
}

/* csum_replace4 updates *sum for a 32-bit field that changed from -> to: HC' = ~(~HC + ~m + m'). */
static __always_inline void csum_replace4(__u16 *sum, __u32 from, __u32 to)
{
	__u32 s = (__u16)~*sum;
	s += (__u16)~(from & 0xffff);
	s += (__u16)~(from >> 16);
	s += to & 0xffff;
	s += to >> 16;
	*sum = csum_fold(s);
}

static __always_inline void csum_replace2(__u16 *sum, __u16 from, __u16 to)
{
	__u32 s = (__u16)~*sum;
	s += (__u16)~from;
	s += to;
	*sum = csum_fold(s);
}

/* l4_csum_replace4 updates a TCP or UDP checksum for an address change (the pseudo header).
 * A UDP checksum of 0 means "none" and stays 0; a computed 0 is sent as 0xffff. */
static __always_inline void l4_csum_replace4(__u16 *sum, __u8 proto, __u32 from, __u32 to)
{
	if (proto == IPPROTO_UDP) {
		if (*sum == 0)
			return;
		csum_replace4(sum, from, to);
		if (*sum == 0)
			*sum = 0xffff;
		return;
	}
	csum_replace4(sum, from, to);
}

#endif
