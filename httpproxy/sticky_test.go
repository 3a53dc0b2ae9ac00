package httpproxy

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"ballast/config"
)

// TestStickyCookie: the first response names its backend in an opaque cookie; requests with
// it stay on that backend; when it becomes unusable they are rebalanced and the cookie
// replaced; a forged cookie is ignored.
func TestStickyCookie(t *testing.T) {
	var addrs []string
	for _, name := range []string{"a", "b", "c"} {
		rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, name) })
		addrs = append(addrs, hostOf(rec.Server))
	}
	pc := testPool("p", "roundrobin", addrs...)
	for i, n := range []string{"a", "b", "c"} {
		pc.Backends[i].Name = n
	}
	pc.Sticky = &config.Sticky{Cookie: "SRV", Path: "/", MaxAge: dur(time.Hour), HTTPOnly: true}
	tp := startProxy(t, testConfig(pc))
	c := testClient()
	send := func(cookie string) (string, string) {
		h := map[string]string{}
		if cookie != "" {
			h["Cookie"] = "other=1; SRV=" + cookie
		}
		resp, body := get(t, c, "GET", tp.url("/"), nil, h)
		return string(body), resp.Header.Get("Set-Cookie")
	}
	re := regexp.MustCompile(`^SRV=([0-9a-f]{16}); Path=/; Max-Age=3600; HttpOnly$`)
	first, set := send("")
	m := re.FindStringSubmatch(set)
	if m == nil {
		t.Fatalf("first response Set-Cookie %q", set)
	}
	tok := m[1]
	for _, a := range addrs {
		if strings.Contains(set, a) || strings.Contains(set, strings.Split(a, ":")[1]) {
			t.Errorf("the cookie %q reveals the backend's address", set)
		}
	}
	for i := range 12 {
		if got, set := send(tok); got != first || set != "" {
			t.Fatalf("request %d with the cookie: served by %s (want %s), Set-Cookie %q", i, got, first, set)
		}
	}

	// The pinned backend is disabled: rebalanced, and the cookie now names the new one.
	if err := tp.pools["p"].Disable(first); err != nil {
		t.Fatal(err)
	}
	got, set := send(tok)
	m2 := re.FindStringSubmatch(set)
	if got == first || m2 == nil || m2[1] == tok {
		t.Fatalf("after disabling %s: served by %s, Set-Cookie %q", first, got, set)
	}
	for range 6 {
		if again, _ := send(m2[1]); again != got {
			t.Fatalf("the replaced cookie sends to %s, want %s", again, got)
		}
	}
	// Back in rotation, the old cookie works again; a forged one is rebalanced and replaced.
	if err := tp.pools["p"].Enable(first); err != nil {
		t.Fatal(err)
	}
	if again, set := send(tok); again != first || set != "" {
		t.Errorf("old cookie after re-enabling: %s, Set-Cookie %q", again, set)
	}
	if _, set := send("0123456789abcdef"); re.FindStringSubmatch(set) == nil {
		t.Errorf("forged cookie: Set-Cookie %q, want a fresh one", set)
	}
}
