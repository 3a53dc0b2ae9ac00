/* DR (direct routing): the frame goes to the real server unchanged but for its MACs; the real
 * server holds the VIP on lo and answers the client directly. */
#ifndef BALLAST_DR_H
#define BALLAST_DR_H

#include "common.h"
#include "parse.h"

static __always_inline int forward_dr(struct pkt *p, struct real_def *r, struct director_config *cfg)
{
	__builtin_memcpy(p->eth->h_dest, r->mac, ETH_ALEN);
	__builtin_memcpy(p->eth->h_source, cfg->mac, ETH_ALEN);
	return XDP_TX;
}

/* forward_dr_second sends the frame to r with the second-chance real server r2's address in
 * the source MAC (SC_MAC0:SC_MAC1:r2), for the real server's program (bpf/decap.c). */
static __always_inline int forward_dr_second(struct pkt *p, struct real_def *r, struct real_def *r2)
{
	__builtin_memcpy(p->eth->h_dest, r->mac, ETH_ALEN);
	p->eth->h_source[0] = SC_MAC0;
	p->eth->h_source[1] = SC_MAC1;
	__builtin_memcpy(&p->eth->h_source[2], &r2->addr, 4);
	return XDP_TX;
}

#endif
