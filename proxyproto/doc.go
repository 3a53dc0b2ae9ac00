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
// Listener wraps a net.Listener: Accept returns at once, without reading, so one slow client
// never stalls the accept loop; the header is read, within the listener's timeout, by the
// connection's first Read, RemoteAddr or LocalAddr, in the goroutine that serves the connection.
// RemoteAddr and LocalAddr then report the addresses from the header (a LOCAL or UNKNOWN header
// keeps the socket's own). A connection whose header is missing, malformed or late is closed and
// counted (Listener.Refused); its Read returns the error. This is what fasthttp needs, which
// learns the client from conn.RemoteAddr().
//
// # Concurrency
//
// Parse, Read and Header methods are pure or confined to their arguments. A Listener and its
// counter are safe for concurrent use; a Conn is used as any net.Conn (one reader, one writer),
// and RemoteAddr/LocalAddr may be called from any goroutine.
package proxyproto
