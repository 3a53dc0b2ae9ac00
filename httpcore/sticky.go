package httpcore

import (
	"strconv"

	"ballast/config"
	"ballast/upstream"
)

// sticky is a pool's compiled cookie insertion. The cookie holds a token, 16 hex digits of
// a hash of the pool and backend names: opaque to clients (not the address), stable across
// restarts and reloads, and the same on every Ballast instance with the same configuration.
type sticky struct {
	pool   string
	name   []byte
	attrs  []byte            // "; Path=/; Max-Age=…; Secure; HttpOnly"
	byTok  map[uint64]string // token → backend ID, for the backends configured at build
	cookie []byte            // "NAME=" prefix of the Set-Cookie value
}

func newSticky(pc *config.Pool, pool *upstream.Pool) *sticky {
	st := pc.Sticky
	if st == nil {
		return nil
	}
	s := &sticky{pool: pc.Name, name: []byte(st.Cookie), byTok: map[uint64]string{}}
	s.cookie = append([]byte(st.Cookie), '=')
	path := st.Path
	if path == "" {
		path = "/"
	}
	s.attrs = append(s.attrs, "; Path="+path...)
	if st.MaxAge.Duration > 0 {
		s.attrs = append(s.attrs, "; Max-Age="+strconv.FormatInt(int64(st.MaxAge.Seconds()), 10)...)
	}
	if st.Secure {
		s.attrs = append(s.attrs, "; Secure"...)
	}
	if st.HTTPOnly {
		s.attrs = append(s.attrs, "; HttpOnly"...)
	}
	for _, b := range pool.Backends() {
		s.byTok[s.token(b.ID)] = b.ID
	}
	return s
}

// token is the cookie value's number for backend id.
func (s *sticky) token(id string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037) // FNV-1a, inline so that it does not allocate
	for i := 0; i < len(s.pool); i++ {
		h = (h ^ uint64(s.pool[i])) * prime
	}
	h *= prime // the 0 separator
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * prime
	}
	return h
}

// parseToken reads a cookie value of exactly 16 lower-case hex digits.
func parseToken(v []byte) (uint64, bool) {
	if len(v) != 16 || !lowerHex(v) {
		return 0, false
	}
	n, err := strconv.ParseUint(b2s(v), 16, 64)
	return n, err == nil
}

// pinned acquires the backend the request's cookie names, when there is a valid cookie and
// that backend can take the request; otherwise nil.
func (s *sticky) pinned(req Request, pool *upstream.Pool) *upstream.Backend {
	tok, ok := parseToken(req.Cookie(s.name))
	if !ok {
		return nil
	}
	id, ok := s.byTok[tok]
	if !ok { // a backend added at runtime since the table was built
		for _, b := range pool.Backends() {
			if s.token(b.ID) == tok {
				id, ok = b.ID, true
				break
			}
		}
		if !ok {
			return nil
		}
	}
	return pool.AcquireBackend(id)
}

// setCookie sets the cookie naming b on resp unless the request already carried exactly
// that one.
func (s *sticky) setCookie(req Request, resp Header, b *upstream.Backend, x *Exchange) {
	tok := s.token(b.ID)
	if cur, ok := parseToken(req.Cookie(s.name)); ok && cur == tok {
		return
	}
	v := append(x.tmp[:0], s.cookie...)
	v = appendHex16(v, tok)
	v = append(v, s.attrs...)
	x.tmp = v
	resp.Add(keySetCookie, v)
}

func appendHex16(b []byte, u uint64) []byte {
	for i := 60; i >= 0; i -= 4 {
		b = append(b, hexDigits[(u>>uint(i))&15])
	}
	return b
}
