package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

// Client talks to a running Ballast's admin API; `ballast ctl` is a thin shell around it.
type Client struct {
	// Base is the admin URL, e.g. http://127.0.0.1:9090.
	Base string
	// Token is sent as a bearer token when set.
	Token string
	HTTP  *http.Client
	// Fleet sends changes to every node of the fleet (?fleet=1) instead of this one.
	Fleet bool
}

// NewClient returns a Client for base ("host:port" or a URL) with a 10 s timeout.
func NewClient(base, token string) *Client {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &Client{Base: strings.TrimRight(base, "/"), Token: token, HTTP: &http.Client{Timeout: 10 * time.Second}}
}

// APIError is a refusal from the admin API.
type APIError struct {
	Status int
	Msg    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Msg)
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	if c.Fleet && method != http.MethodGet {
		path += "?fleet=1"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &APIError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Pools fetches GET /api/pools.
func (c *Client) Pools(ctx context.Context) (*PoolsResponse, error) {
	var out PoolsResponse
	if err := c.do(ctx, http.MethodGet, "/api/pools", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ChangeResult is the answer to a change.
type ChangeResult struct {
	Change string `json:"change"`
}

func backendPath(pool, id string) string {
	return "/api/pools/" + url.PathEscape(pool) + "/backends/" + url.PathEscape(id)
}

// Action runs drain, disable, enable or remove on one backend.
func (c *Client) Action(ctx context.Context, pool, id, action string) (string, error) {
	var out ChangeResult
	err := c.do(ctx, http.MethodPost, backendPath(pool, id)+"/"+url.PathEscape(action), struct{}{}, &out)
	return out.Change, err
}

// SetWeight overrides a backend's weight.
func (c *Client) SetWeight(ctx context.Context, pool, id string, w int) (string, error) {
	var out ChangeResult
	err := c.do(ctx, http.MethodPost, backendPath(pool, id)+"/weight", WeightRequest{Weight: &w}, &out)
	return out.Change, err
}

// Add puts a new backend into a pool.
func (c *Client) Add(ctx context.Context, pool string, req AddRequest) (string, error) {
	var out ChangeResult
	err := c.do(ctx, http.MethodPost, "/api/pools/"+url.PathEscape(pool)+"/backends", req, &out)
	return out.Change, err
}

// WriteStatus prints pools and backends as an aligned table.
func WriteStatus(w io.Writer, r *PoolsResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, p := range r.Pools {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "pool %s (%s)  queue %d/%d  queued %d  timed out %d  rejected %d\t\n",
			p.Name, p.Balancer, p.Queue, p.MaxQueue, p.QueueStats.Queued, p.QueueStats.TimedOut, p.QueueStats.Rejected)
		fmt.Fprintln(tw, "BACKEND\tSTATE\tWEIGHT\tEFF\tBUSY\tREQUESTS\tERRORS\tEWMA ms\tP99 ms\tLAST CHECK\t")
		for _, b := range p.Backends {
			wt := fmt.Sprint(b.Weight)
			if b.WeightOverridden {
				wt += "*"
			}
			p99 := "-"
			if b.LatencyP99Ms != nil {
				p99 = fmt.Sprintf("%.1f", *b.LatencyP99Ms)
			}
			check := "-"
			if b.Health != nil {
				check = "ok"
				if !b.Health.OK {
					check = "fail: " + b.Health.Detail
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%d\t%d\t%d\t%.1f\t%s\t%s\t\n",
				b.ID, b.State, wt, b.EffectiveWeight, b.InFlight, b.Requests, b.Failures, b.LatencyEWMAMs, p99, check)
		}
		ov := p.Overrides
		if n := len(ov.Backends) + len(ov.Added) + len(ov.Removed); n > 0 {
			fmt.Fprintf(tw, "runtime overrides: %d (weights marked *; added %v; removed %v)\t\n", n, ov.Added, ov.Removed)
		}
	}
	writeDirectors(tw, r.Directors)
	writeDiscovery(tw, r)
	return tw.Flush()
}
