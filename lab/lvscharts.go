package lab

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// lvsCharts draws lvs-modes: seed 003's curve (TTFB, and response time p50 and p99, against
// concurrency, one line per mode), seed 004's table (throughput at -c 500 with the seed's
// figures marked) and what crossed the director per request.
func lvsCharts(r *Report, dir string) error {
	curves := map[string]plotter.XYs{}
	p50s, p99s := map[string]plotter.XYs{}, map[string]plotter.XYs{}
	var modes []string
	thr := &Report{Scenario: r.Scenario, Metric: Throughput, IdealValue: r.IdealValue}
	for _, res := range r.Results {
		mode, variant, _ := strings.Cut(res.Algorithm, " (")
		if c, ok := strings.CutPrefix(variant, "c="); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(c, ")"))
			if err != nil {
				continue
			}
			if _, seen := curves[mode]; !seen {
				modes = append(modes, mode)
			}
			curves[mode] = append(curves[mode], plotter.XY{X: float64(n), Y: res.Detail.TTFBP50Ms})
			p50s[mode] = append(p50s[mode], plotter.XY{X: float64(n), Y: res.P50Ms})
			p99s[mode] = append(p99s[mode], plotter.XY{X: float64(n), Y: res.P99Ms})
			continue
		}
		row := res
		row.Algorithm = mode
		thr.Results = append(thr.Results, row)
	}
	if err := lineChart(filepath.Join(dir, "ttfb.svg"), r.Scenario+": time to first byte (p50) by concurrency", "TTFB p50, ms", modes, curves, nil); err != nil {
		return err
	}
	if err := lineChart(filepath.Join(dir, "latency.svg"), r.Scenario+": response time by concurrency (solid p50, dashed p99)", "ms", modes, p50s, p99s); err != nil {
		return err
	}
	if len(thr.Results) == 0 {
		return nil
	}
	if err := thr.metricChart(filepath.Join(dir, "throughput.svg")); err != nil {
		return err
	}
	p := thr.newPlot(r.Scenario+": through the director per request (-c 500)", "bytes per request")
	resp := make(plotter.Values, len(thr.Results))
	sent := make(plotter.Values, len(thr.Results))
	top := 1.0
	for i, res := range thr.Results {
		resp[i], sent[i] = res.Detail.ResponseBytesPerReq, res.Detail.DirectorBytesPerReq
		top = max(top, resp[i], sent[i])
	}
	w := vg.Points(8)
	for i, s := range []struct {
		name string
		v    plotter.Values
	}{{"response bytes received from the real servers", resp}, {"bytes the XDP program sent to the real servers", sent}} {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = plotutil.Color(i), 0
		b.Offset = w * vg.Length(2*i-1) / 2
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.Y.Min, p.Y.Max = 0, legendRoom(2)*top
	return thr.save(p, filepath.Join(dir, "director.svg"))
}

// lineChart draws one line per mode against concurrency; dashed, when given, adds a dashed
// line per mode in the same colour.
func lineChart(file, title, ylabel string, modes []string, solid, dashed map[string]plotter.XYs) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrency"
	p.Y.Label.Text = ylabel
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	top := 0.0
	for i, m := range modes {
		for k, set := range []map[string]plotter.XYs{solid, dashed} {
			if set == nil || len(set[m]) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(set[m])
			if err != nil {
				return err
			}
			l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			if k == 1 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, pts)
			if k == 0 {
				p.Legend.Add(m, l, pts)
			}
			for _, xy := range set[m] {
				top = max(top, xy.Y)
			}
		}
	}
	p.Y.Min, p.Y.Max = 0, legendRoom(len(modes))*max(top, 1e-3)
	if err := p.Save(18*vg.Centimeter, 12*vg.Centimeter, file); err != nil {
		return fmt.Errorf("lab: chart %s: %w", file, err)
	}
	return nil
}
