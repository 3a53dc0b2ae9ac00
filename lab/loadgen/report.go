package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"
)

// JSON is the one-object form ballast bench --json prints: exactly the keys requests, failed,
// non2xx, seconds, throughput_rps, p50_ms, p90_ms, p99_ms, max_ms, ttfb_p50_ms and split.
func (r *Result) JSON() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a Result holds only numbers and a map of strings
	}
	return b
}

// WriteText prints the figures in ab's layout, followed by latency quantiles and the split.
func (r *Result) WriteText(w io.Writer) {
	o := r.Options
	host, port, path := r.Options.URL, "", "/"
	if u, err := url.Parse(o.URL); err == nil {
		host, port, path = u.Hostname(), u.Port(), u.RequestURI()
		if port == "" {
			port = "80"
		}
	}
	keepAlive := int64(0)
	if o.KeepAlive {
		keepAlive = r.Requests - r.Failed - r.Conns
		keepAlive = max(keepAlive, 0)
	}
	fmt.Fprintf(w, "Server Hostname:        %s\n", host)
	fmt.Fprintf(w, "Server Port:            %s\n\n", port)
	fmt.Fprintf(w, "Document Path:          %s\n", path)
	fmt.Fprintf(w, "Document Length:        %d bytes\n\n", r.BodyBytes)
	fmt.Fprintf(w, "Concurrency Level:      %d\n", o.C)
	fmt.Fprintf(w, "Time taken for tests:   %.3f seconds\n", r.Seconds)
	fmt.Fprintf(w, "Complete requests:      %d\n", r.Requests)
	fmt.Fprintf(w, "Failed requests:        %d\n", r.Failed)
	fmt.Fprintf(w, "Non-2xx responses:      %d\n", r.Non2xx)
	if o.KeepAlive {
		fmt.Fprintf(w, "Keep-Alive requests:    %d\n", keepAlive)
	}
	fmt.Fprintf(w, "Total transferred:      %d bytes\n", r.Bytes)
	fmt.Fprintf(w, "Requests per second:    %.2f [#/sec] (mean)\n", r.ThroughputRPS)
	if r.Requests > 0 {
		fmt.Fprintf(w, "Time per request:       %.3f [ms] (mean)\n", float64(o.C)*r.Seconds*1000/float64(r.Requests))
		fmt.Fprintf(w, "Time per request:       %.3f [ms] (mean, across all concurrent requests)\n", r.Seconds*1000/float64(r.Requests))
	}
	if r.Seconds > 0 {
		fmt.Fprintf(w, "Transfer rate:          %.2f [Kbytes/sec] received\n", float64(r.Bytes)/1024/r.Seconds)
	}
	fmt.Fprintf(w, "\nLatency (ms):           p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
		r.P50Ms, r.P90Ms, r.P99Ms, r.P999Ms, r.MaxMs)
	fmt.Fprintf(w, "Time to first byte:     p50 %.3f ms\n", r.TTFBP50Ms)
	if len(r.Split) > 0 {
		fmt.Fprintf(w, "\nSplit by %s:\n", HeaderBackend)
		names := make([]string, 0, len(r.Split))
		width := 0
		for n := range r.Split {
			names = append(names, n)
			width = max(width, len(n))
		}
		sort.Strings(names)
		total := r.Requests - r.Failed
		for _, n := range names {
			pct := 0.0
			if total > 0 {
				pct = 100 * float64(r.Split[n]) / float64(total)
			}
			fmt.Fprintf(w, "  %-*s %10d  %5.1f %%\n", width, n, r.Split[n], pct)
		}
	}
}

// Bar returns a progress callback that redraws one line on w: a bar for a run of total
// requests, or for a run of duration d when total is 0, with the mean rate so far.
func Bar(w io.Writer, total int64, d time.Duration) func(done int64) {
	const width = 30
	begin := time.Now()
	return func(done int64) {
		el := time.Since(begin)
		frac := 0.0
		switch {
		case total > 0:
			frac = float64(done) / float64(total)
		case d > 0:
			frac = el.Seconds() / d.Seconds()
		}
		frac = min(max(frac, 0), 1)
		filled := int(frac * width)
		rate := 0.0
		if el > 0 {
			rate = float64(done) / el.Seconds()
		}
		fmt.Fprintf(w, "\r[%s%s] %3.0f%%  %d requests  %.0f req/s ", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), 100*frac, done, rate)
	}
}
