package advise

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// maxTableRows bounds the choices the table prints (the JSON has them all).
const maxTableRows = 40

// WriteTable prints the advice: what was replayed, one row per choice (the best first, the
// current marked) with every predicted figure as median [min, max], and the verdict.
func (a *Advice) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "advise %s (%s): objective %s, %d runs per choice, %d requests each\n", a.Pool, a.Source, a.Objective, a.Runs, a.Requests)
	for _, m := range a.Model {
		fmt.Fprintf(w, "  model: %s\n", m)
	}
	names := a.names()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\tbalancer\tmax_conns\tmax_queue\thedge\tthroughput req/s\tmakespan s\tp50\tp99\tqueue\tshare %s\tfailed\n", strings.Join(names, "/"))
	for i, c := range a.Choices {
		if i == maxTableRows {
			fmt.Fprintf(tw, "\t(%d more in --json)\t\t\t\t\t\t\t\t\t\t\n", len(a.Choices)-i)
			break
		}
		mark := ""
		switch {
		case i == 0 && c.Current:
			mark = "best, current"
		case i == 0:
			mark = "best"
		case c.Current:
			mark = "current"
		}
		hedge := "off"
		if c.Settings.HedgeDelayMs > 0 {
			hedge = fmtMs(c.Settings.HedgeDelayMs)
		}
		queue := fmt.Sprint(c.Settings.MaxQueue)
		if c.Settings.MaxConns == 0 {
			queue = "-"
		}
		p, r := c.Predicted, c.Range
		failed := "0"
		if p.FailedPct > 0 || p.ErrorsPct > 0 {
			failed = fmt.Sprintf("%.1f%%", p.FailedPct+p.ErrorsPct)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f [%.0f, %.0f]\t%.3f [%.3f, %.3f]\t%s [%s, %s]\t%s [%s, %s]\t%s [%s, %s]\t%s\t%s\n",
			mark, c.Balancer, c.Settings.MaxConns, queue, hedge,
			p.ThroughputRPS, r.ThroughputRPS[0], r.ThroughputRPS[1],
			p.MakespanS, r.MakespanS[0], r.MakespanS[1],
			fmtMs(p.P50Ms), fmtMs(r.P50Ms[0]), fmtMs(r.P50Ms[1]),
			fmtMs(p.P99Ms), fmtMs(r.P99Ms[0]), fmtMs(r.P99Ms[1]),
			fmtMs(p.QueueMs), fmtMs(r.QueueMs[0]), fmtMs(r.QueueMs[1]),
			shareString(c, names), failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "verdict: %s\n", a.Verdict)
	return err
}

// JSON is the advice as `ballast advise --json` prints it.
func (a *Advice) JSON() []byte {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		panic(err) // numbers, strings, maps and slices of them
	}
	return append(b, '\n')
}
