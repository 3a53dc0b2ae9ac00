// Package proxyproto speaks the PROXY protocol, versions 1 (text) and 2 (binary), as HAProxy's
// proxy-protocol.txt defines them: Ballast sends a header to backends (send_proxy) so that they
// see the original client address, and reads one from clients on listeners behind another proxy
// (accept_proxy), for L4 and L7 listeners alike.
//
// # Contract
//
// Header.Append encodes; Parse decodes one header from the front of a byte slice and says how
// many bytes it took, or ErrIncomplete when the bytes are a valid but unfinished prefix. Read
// fills a caller's buffer from a reader until Parse decides, never reading more than
// MaxHeaderLen bytes, and returns what followed the header in the same reads, which belongs to
// the application stream. A v1 header is at most 107 bytes; a v2 header at most MaxHeaderLen,
// and its TLVs are walked with bounds checks and otherwise ignored. Parse never panics on input.
//
// Trust is the set of peers a header is believed from (trusted_proxies); the readers of
// headers (the HTTP engine on its shards, the L4 proxy) check the peer before they parse.
//
// # Concurrency
//
// Parse, Read, Header and Trust methods are pure or confined to their arguments.
package proxyproto
