package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

const (
	sessionCookie = "ballast_session"
	nonceHeader   = "X-Ballast-Nonce"
)

// session returns the request's page session, creating one (and its cookie) when absent.
func (p *Plane) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && validSession(c.Value) {
		return c.Value
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return id
}

func validSession(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// nonce is the page's anti-CSRF token for a session: an HMAC under a per-process key, so a
// nonce is worthless without the session cookie it belongs to, and both die with the process.
func (p *Plane) nonce(session string) string {
	m := hmac.New(sha256.New, p.key[:])
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// authError is a refused change: the status and the reason given to the client.
type authError struct {
	status int
	msg    string
}

// authorize decides whether r may change anything (see the package documentation).
func (p *Plane) authorize(r *http.Request) *authError {
	if s := r.Header.Get("Sec-Fetch-Site"); s == "cross-site" || s == "same-site" {
		return &authError{http.StatusForbidden, "cross-site requests may not change anything"}
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return &authError{http.StatusForbidden, "request from a foreign origin " + o}
	}
	if tok := p.currentToken(); tok != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			return &authError{http.StatusUnauthorized, "changes need Authorization: Bearer TOKEN (admin.token)"}
		}
	} else if !loopbackPeer(r.RemoteAddr) {
		return &authError{http.StatusForbidden, "without admin.token changes are accepted only from this machine (loopback)"}
	} else if !loopbackHost(r.Host) {
		return &authError{http.StatusForbidden, "without admin.token changes are accepted only for a loopback Host"}
	}
	if n := r.Header.Get(nonceHeader); n != "" {
		c, err := r.Cookie(sessionCookie)
		if err != nil || !validSession(c.Value) || !hmac.Equal([]byte(n), []byte(p.nonce(c.Value))) {
			return &authError{http.StatusForbidden, "stale or invalid page nonce: reload the page"}
		}
		return nil
	}
	if r.Header.Get("Authorization") != "" {
		return nil
	}
	// No nonce, no token: only a JSON request, which a cross-site HTML form cannot send.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return &authError{http.StatusForbidden, "send Content-Type: application/json (or use the status page)"}
	}
	return nil
}

// loopbackPeer reports whether the connection comes from this machine's loopback interface.
// Only the peer's address decides where a request comes from: every header is the client's to
// write. (loopbackHost is checked too, but against DNS rebinding, not as a proof of origin.)
func loopbackPeer(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// loopbackHost reports whether a Host header names this machine's loopback interface.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
