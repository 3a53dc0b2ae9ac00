package httpproxy

import (
	"fmt"
	"strings"
	"testing"

	"ballast/config"
)

// TestRetryBudgetZeroMeansNone loads the pool from YAML, as a file would be, with a backend that
// closes every connection before answering and a good one behind roundrobin. Without a budget
// key the default (0.2 plus the floor) moves every GET that hit the closer to the good backend;
// with retries.budget: 0 none is moved: each one that hit the closer is answered 502.
func TestRetryBudgetZeroMeansNone(t *testing.T) {
	closer, _ := closingBackend(t)
	good := newTiny(t, nil)
	for _, tc := range []struct {
		name    string
		retries string
		retry   bool
	}{
		{"budget left out: default", "", true},
		{"budget 0: none", "    retries:\n      budget: 0\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`listeners:
  - address: 127.0.0.1:0
pools:
  - name: r
    backends:
      - address: %s
      - address: %s
%s`, closer, hostOf(good.Server), tc.retries)))
			if err != nil {
				t.Fatal(err)
			}
			tp := startProxy(t, cfg)
			c := testClient()
			const n = 8
			failures := 0
			for range n {
				resp, body := get(t, c, "GET", tp.url("/"), nil, nil)
				switch resp.StatusCode {
				case 200:
				case 502:
					if !strings.Contains(string(body), "closed") {
						t.Fatalf("502 %q, want the closed-connection error", body)
					}
					failures++
				default:
					t.Fatalf("status %d %q", resp.StatusCode, body)
				}
			}
			p := tp.pools["r"]
			waitFor(t, "in-flight back to 0", func() bool { return inflight(p) == 0 })
			onCloser := int(p.Backend(closer).Requests())
			r, _ := tp.PoolCounters("r")
			retries := int(r)
			if onCloser == 0 {
				t.Fatal("the closing backend got no request")
			}
			if tc.retry && (failures != 0 || retries != onCloser) {
				t.Errorf("%d failures and %d retries for %d requests that hit the closer; want 0 failures, one retry each", failures, retries, onCloser)
			}
			if !tc.retry && (failures != onCloser || retries != 0) {
				t.Errorf("%d failures and %d retries for %d requests that hit the closer; want one failure each and no retry", failures, retries, onCloser)
			}
		})
	}
}
