/* Bob Jenkins' lookup3 hash as <linux/jhash.h> writes it, for 1 to 3 words. balance.FlowHash
 * in Go is the same function; director tests check that both agree. */
#ifndef BALLAST_JHASH_H
#define BALLAST_JHASH_H

#include <linux/types.h>

#define JHASH_INITVAL 0xdeadbeef

static __always_inline __u32 rol32(__u32 word, unsigned int shift)
{
	return (word << shift) | (word >> ((-shift) & 31));
}

#define __jhash_final(a, b, c)            \
	{                                 \
		c ^= b;                   \
		c -= rol32(b, 14);        \
		a ^= c;                   \
		a -= rol32(c, 11);        \
		b ^= a;                   \
		b -= rol32(a, 25);        \
		c ^= b;                   \
		c -= rol32(b, 16);        \
		a ^= c;                   \
		a -= rol32(c, 4);         \
		b ^= a;                   \
		b -= rol32(a, 14);        \
		c ^= b;                   \
		c -= rol32(b, 24);        \
	}

static __always_inline __u32 __jhash_nwords(__u32 a, __u32 b, __u32 c, __u32 initval)
{
	a += initval;
	b += initval;
	c += initval;
	__jhash_final(a, b, c);
	return c;
}

static __always_inline __u32 jhash_3words(__u32 a, __u32 b, __u32 c, __u32 initval)
{
	return __jhash_nwords(a, b, c, initval + JHASH_INITVAL + (3 << 2));
}

static __always_inline __u32 jhash_1word(__u32 a, __u32 initval)
{
	return __jhash_nwords(a, 0, 0, initval + JHASH_INITVAL + (1 << 2));
}

#endif
