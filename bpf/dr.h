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

#endif
