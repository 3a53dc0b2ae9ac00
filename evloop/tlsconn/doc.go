// Package tlsconn serves TLS connections from evloop shards, server side (a listener's) and
// client side (a backend's): the handshake runs in a goroutine of its own, off the shard, and
// the records of the established connection are then read and written on the shard through
// crypto/tls, without a goroutine.
//
// # Life of a connection
//
// The shard accepts the socket and hands its descriptor to Handshake, which the caller runs
// in a goroutine: it duplicates the descriptor into a blocking net.Conn of the runtime's
// poller (so the handshake's reads wait in the poller, bounded by a deadline), runs
// crypto/tls's server handshake over it, and returns the Conn. The caller then posts the Conn
// to the shard, registers the original descriptor there and calls Attach, which closes the
// duplicate: from then on every read and write is a raw non-blocking system
// call on the shard's descriptor.
//
// The client side is the same Conn. The shard's non-blocking connect completes; on the shard,
// Client duplicates the descriptor into the runtime's poller and sets crypto/tls's client up
// with the caller's configuration (server name, roots, client certificate, the ALPN list in
// NextProtos, the session cache: a cache shared by a backend's connections resumes sessions,
// TLS 1.3 tickets included, which crypto/tls stores when the shard reads them). Handshake
// runs in a goroutine within its timeout; Cancel, on the shard, ends it at once (the shard's
// own timer, or a request that went away, decides first). Then, as on the server side, the
// Conn is posted back and attached, or released.
//
// # Records on the shard
//
// crypto/tls reads through a transport whose Read is the descriptor's raw read(2) into
// crypto/tls's own record buffer, and returns a temporary net.Error when the socket is
// drained: crypto/tls keeps the part of a record it has and does not latch temporary errors,
// so the next Read (after the next edge) continues the record. Conn.Read then returns
// evloop.ErrAgain, as evloop.FD.Read does. A Read that returned bytes leaves the
// descriptor's Ready marked Readable, since crypto/tls may hold more decrypted or undecrypted
// bytes than the socket shows: the caller reads again, and that read (one system call) ends
// with ErrAgain when nothing is left.
//
// Conn.Write and Writev encrypt at most writeChunk bytes of plaintext at a time; crypto/tls
// hands the records to the transport, which collects them in a buffer of the shard's pool,
// and the buffer goes out in one write(2). What the socket does not take stays in that
// buffer (at most one chunk's ciphertext, about 16 KiB) and the Write reports the chunk's
// plaintext as not written, exactly as a socket would: the caller keeps those bytes and
// offers them again, first, when the descriptor is writable; that Write sends the pending
// ciphertext and counts the bytes it stood for without encrypting them twice. A caller that
// stops producing until its Write took everything (the engine's backpressure) thus buffers
// one chunk at most. Writev(head, body) encrypts both in one record when they fit in a chunk
// (one copy of the plaintext), so a small response is one record and one system call.
//
// Costs per byte: the kernel's copy, the decryption in place in crypto/tls's buffer and one
// copy of the plaintext out of it on reading; the encryption into crypto/tls's record buffer
// and one copy of the ciphertext into the shard's buffer on writing. Per connection, idle:
// the crypto/tls Conn (its cipher states and its record buffer, which keeps the capacity of
// the largest record it read, up to about 16 KiB after a large upload) and this package's
// Conn; no goroutine, no write buffer.
//
// # Concurrency
//
// Handshake runs on any goroutine, Client on the shard, Cancel on any goroutine until the Conn
// is attached or released; after Attach every method runs on the shard's goroutine only. Off
// Linux the package is empty.
package tlsconn
