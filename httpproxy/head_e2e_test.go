package httpproxy

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ballast/internal/h1conformance"
)

// curl runs curl with args (silent, bounded to 20 s) and returns what it printed. Tests that
// use it skip when curl is not installed.
func curl(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed (Debian package curl): ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-s", "--max-time", "15"}, args...)...).Output()
	if ctx.Err() != nil {
		t.Fatalf("curl %v: %v", args, ctx.Err())
	}
	_ = err // curl exits non-zero for a refused CONNECT; the printed status is what counts
	return string(out)
}

// startHeadProxy serves conformanceConfig (routes: Host public.example, path prefix /api/)
// in front of a raw recording backend.
func startHeadProxy(t *testing.T) (*testProxy, *h1conformance.RawBackend) {
	rb := h1conformance.NewRawBackend(t)
	return startProxy(t, conformanceConfig(rb.Addr())), rb
}

// Issue 8 item 2: an absolute-form target is routed on its authority, which is also the Host
// the backend gets; before, the request was routed on Host and forwarded with the authority.
func TestE2EAbsoluteFormRoutesOnAuthority(t *testing.T) {
	tp, rb := startHeadProxy(t)
	code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "--request-target", "http://internal.example/x",
		"-H", "Host: public.example", tp.url("/"))
	if got, _ := rb.Take(t); code != "404" || len(got) > 0 {
		t.Errorf("authority internal.example with Host public.example: status %s, backend got %q; want 404 and nothing", code, got)
	}
	code = curl(t, "-o", "/dev/null", "-w", "%{http_code}", "--request-target", "http://public.example/x",
		"-H", "Host: internal.example", tp.url("/"))
	_, reqs := rb.Take(t)
	if code != "200" || len(reqs) != 1 {
		t.Fatalf("authority public.example: status %s, %d requests at the backend; want 200 and 1", code, len(reqs))
	}
	if r := reqs[0]; r.Target != "http://public.example/x" || len(r.Hosts) != 1 || r.Hosts[0] != "public.example" {
		t.Errorf("backend got target %q with Host %q; want the target as sent and Host public.example", r.Target, r.Hosts)
	}
	if raw := string(reqs[0].Raw); !strings.Contains(raw, "X-Forwarded-Host: public.example\r\n") {
		t.Errorf("X-Forwarded-Host does not name the routed host:\n%s", raw)
	}
}

// Issue 8 item 3: a field name that is not a token is refused with 400 and nothing reaches
// the backend; before, "X Forwarded For" and friends were forwarded verbatim.
func TestE2EInvalidFieldNameRefused(t *testing.T) {
	tp, rb := startHeadProxy(t)
	for _, hdr := range []string{"X Forwarded For: 6.6.6.6", "Content Length: 4", "Transfer Encoding: chunked"} {
		code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: public.example", "-H", hdr, tp.url("/"))
		if got, _ := rb.Take(t); code != "400" || len(got) > 0 {
			t.Errorf("%q: status %s, backend got %q; want 400 and nothing", hdr, code, got)
		}
	}
}

// Issue 8 item 7: the request target reaches the backend byte for byte (encoded slashes, the
// asterisk of OPTIONS *); before, it was percent-decoded and normalised on the way.
func TestE2ETargetForwardedByteForByte(t *testing.T) {
	tp, rb := startHeadProxy(t)
	for _, tc := range []struct{ method, target string }{
		{"GET", "/anything/a%2Fb?x=%2F"},
		{"GET", "/a/%2e%2e/b"},
		{"OPTIONS", "*"},
	} {
		code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "-X", tc.method, "--path-as-is",
			"--request-target", tc.target, "-H", "Host: public.example", tp.url("/"))
		_, reqs := rb.Take(t)
		if code != "200" || len(reqs) != 1 || reqs[0].Target != tc.target {
			var got []string
			for _, r := range reqs {
				got = append(got, r.Target)
			}
			t.Errorf("%s %s: status %s, backend targets %q; want 200 and the target unchanged", tc.method, tc.target, code, got)
		}
	}
}

// Issue 8 item 8: a body without Content-Type is forwarded without one, and CONNECT is
// answered 405 with Allow instead of being forwarded as an ordinary request.
func TestE2ERequestForwardedUnchangedAndConnectRefused(t *testing.T) {
	tp, rb := startHeadProxy(t)
	code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", "--data-binary", "abcd", "-H", "Content-Type:",
		"-H", "Host: public.example", tp.url("/up"))
	_, reqs := rb.Take(t)
	if code != "200" || len(reqs) != 1 {
		t.Fatalf("POST: status %s, %d requests at the backend", code, len(reqs))
	}
	if raw := string(reqs[0].Raw); strings.Contains(strings.ToLower(raw), "content-type") || !strings.HasSuffix(raw, "\r\n\r\nabcd") {
		t.Errorf("backend got a changed request:\n%s", raw)
	}

	// curl as an HTTPS client with Ballast as its proxy: the CONNECT is refused.
	out := curl(t, "-o", "/dev/null", "-w", "%{http_connect}", "-p", "-x", tp.url(""), "https://public.example/")
	if got, _ := rb.Take(t); out != "405" || len(got) > 0 {
		t.Errorf("CONNECT through curl -p: status %q, backend got %q; want 405 and nothing", out, got)
	}
	head := curl(t, "-i", "-X", "CONNECT", "--request-target", "public.example:443", tp.url(""))
	if !strings.HasPrefix(head, "HTTP/1.1 405 ") || !strings.Contains(head, "\r\nAllow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE\r\n") {
		t.Errorf("CONNECT answer lacks 405 or Allow:\n%s", head)
	}
	if got, _ := rb.Take(t); len(got) > 0 {
		t.Errorf("backend got %q for CONNECT", got)
	}
}
