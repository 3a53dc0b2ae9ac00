package lab

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart colours: measured figures in a calm blue, the seed in red, the model in dark grey.
var (
	colMeasured = color.RGBA{R: 0x4c, G: 0x78, B: 0xa8, A: 0xff}
	colP99      = color.RGBA{R: 0xf5, G: 0x85, B: 0x18, A: 0xff}
	colSeed     = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colModel    = color.RGBA{R: 0x33, G: 0x33, B: 0x33, A: 0xff}
	colIdeal    = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// maxSplitBackends is the most backends a split chart stacks; larger pools get none.
const maxSplitBackends = 6

// WriteCharts draws the report as SVG files in dir: the scenario's metric per row (throughput.svg
// or makespan.svg) with the seed, the model and the ideal marked; latency.svg (p50 and p99);
// split.svg (share per backend) for small pools; and cpu.svg (proxy CPU per request) when known.
func (r *Report) WriteCharts(dir string) error {
	if r.charts != nil && len(r.Failover) > 0 { // the failover lab has rows of its own
		return r.charts(r, dir)
	}
	if len(r.Results) == 0 {
		return nil
	}
	if r.charts != nil {
		return r.charts(r, dir)
	}
	if err := r.metricChart(filepath.Join(dir, string(r.metricName())+".svg")); err != nil {
		return err
	}
	if err := r.latencyChart(filepath.Join(dir, "latency.svg")); err != nil {
		return err
	}
	if names := r.backendNames(); len(names) <= maxSplitBackends {
		if err := r.splitChart(filepath.Join(dir, "split.svg"), names); err != nil {
			return err
		}
	}
	for _, res := range r.Results {
		if res.Detail.CPUUsPerReq > 0 {
			return r.cpuChart(filepath.Join(dir, "cpu.svg"))
		}
	}
	return nil
}

func (r *Report) metricName() Metric {
	if r.Metric == Makespan {
		return Makespan
	}
	return Throughput
}

// value returns a row's (or a reference's) figure in the scenario's metric.
func (r *Report) value(rps, makespan float64) float64 {
	if r.metricName() == Makespan {
		return makespan
	}
	return rps
}

func (r *Report) labels() []string {
	out := make([]string, len(r.Results))
	for i, res := range r.Results {
		out[i] = res.Algorithm
	}
	return out
}

// newPlot builds a plot with one nominal X category per row, labels turned to fit.
func (r *Report) newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.NominalX(r.labels()...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = text.XRight
	p.X.Tick.Label.YAlign = text.YCenter
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = vg.Points(12)
	p.Add(plotter.NewGrid())
	return p
}

// chartWidth grows with the number of rows so that labels stay readable.
func (r *Report) chartWidth() vg.Length {
	return vg.Length(math.Max(16, 1.2*float64(len(r.Results))+4)) * vg.Centimeter
}

func (r *Report) save(p *plot.Plot, file string) error {
	if err := p.Save(r.chartWidth(), 12*vg.Centimeter, file); err != nil {
		return fmt.Errorf("lab: chart %s: %w", file, err)
	}
	return nil
}

// marks returns the points of the rows that have a reference figure.
func (r *Report) marks(ref func(Result) Figures) plotter.XYs {
	var pts plotter.XYs
	for i, res := range r.Results {
		f := ref(res)
		if v := r.value(f.ThroughputRPS, f.MakespanS); v > 0 {
			pts = append(pts, plotter.XY{X: float64(i), Y: v})
		}
	}
	return pts
}

func (r *Report) metricChart(file string) error {
	ylabel, title := "requests per second", r.Scenario+": throughput"
	if r.metricName() == Makespan {
		ylabel, title = "seconds to finish", r.Scenario+": makespan (lower is better)"
	}
	p := r.newPlot(title, ylabel)
	top := r.IdealValue
	for _, res := range r.Results {
		top = max(top, r.value(res.ThroughputRPS, res.MakespanS), r.value(res.Seed.ThroughputRPS, res.Seed.MakespanS),
			r.value(res.Predicted.ThroughputRPS, res.Predicted.MakespanS))
	}
	entries, err := r.barsByBase(p, func(res Result) float64 { return r.value(res.ThroughputRPS, res.MakespanS) })
	if err != nil {
		return err
	}
	for _, m := range []struct {
		name  string
		ref   func(Result) Figures
		col   color.Color
		shape draw.GlyphDrawer
	}{
		{"seed", func(x Result) Figures { return x.Seed }, colSeed, draw.CrossGlyph{}},
		{"model", func(x Result) Figures { return x.Predicted }, colModel, draw.TriangleGlyph{}},
	} {
		pts := r.marks(m.ref)
		if len(pts) == 0 {
			continue
		}
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: m.col, Radius: vg.Points(4), Shape: m.shape}
		p.Add(s)
		p.Legend.Add(m.name, s)
		entries++
	}
	if r.IdealValue > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: r.IdealValue}, {X: float64(len(r.Results)) - 0.5, Y: r.IdealValue}})
		if err != nil {
			return err
		}
		line.Color, line.Dashes = colIdeal, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("ideal", line)
		entries++
	}
	p.Y.Min, p.Y.Max = 0, legendRoom(entries)*top
	return r.save(p, file)
}

// base is a row's algorithm or proxy without its variant: "sqf (no keep-alive)" is "sqf".
func base(label string) string {
	b, _, _ := strings.Cut(label, " (")
	return b
}

// barsByBase draws one bar per row, coloured by the row's algorithm (or proxy) so that the
// same method is the same colour in every variant, with one legend entry per method.
func (r *Report) barsByBase(p *plot.Plot, value func(Result) float64) (entries int, err error) {
	var bases []string
	for _, res := range r.Results {
		if b := base(res.Algorithm); !slices.Contains(bases, b) {
			bases = append(bases, b)
		}
	}
	for k, b := range bases {
		vals := make(plotter.Values, len(r.Results))
		for i, res := range r.Results {
			if base(res.Algorithm) == b {
				vals[i] = value(res)
			}
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(14))
		if err != nil {
			return 0, err
		}
		bars.Color, bars.LineStyle.Width = plotutil.Color(k), 0
		p.Add(bars)
		p.Legend.Add(b, bars)
	}
	return len(bases), nil
}

func (r *Report) latencyChart(file string) error {
	p := r.newPlot(r.Scenario+": latency", "milliseconds")
	p50 := make(plotter.Values, len(r.Results))
	p99 := make(plotter.Values, len(r.Results))
	for i, res := range r.Results {
		p50[i], p99[i] = res.P50Ms, res.P99Ms
	}
	w := vg.Points(8)
	for i, s := range []struct {
		name string
		v    plotter.Values
		col  color.Color
	}{{"p50", p50, colMeasured}, {"p99", p99, colP99}} {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = s.col, 0
		b.Offset = w * vg.Length(2*i-1) / 2
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	top := 0.0
	for _, res := range r.Results {
		top = max(top, res.P99Ms)
	}
	p.Y.Min, p.Y.Max = 0, legendRoom(2)*top
	return r.save(p, file)
}

// backendNames lists every backend that appears in a split, sorted.
func (r *Report) backendNames() []string {
	seen := map[string]bool{}
	for _, res := range r.Results {
		for n := range res.Split {
			seen[n] = true
		}
	}
	return sortedKeys(seen)
}

func (r *Report) splitChart(file string, names []string) error {
	p := r.newPlot(r.Scenario+": share of responses per backend", "percent of responses")
	var below *plotter.BarChart
	for k, name := range names {
		vals := make(plotter.Values, len(r.Results))
		for i, res := range r.Results {
			var total int64
			for _, c := range res.Split {
				total += c
			}
			vals[i] = pct(res.Split[name], total)
		}
		b, err := plotter.NewBarChart(vals, vg.Points(14))
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = plotutil.Color(k), 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(name, b)
	}
	p.Y.Min, p.Y.Max = 0, 125 // room for the legend
	return r.save(p, file)
}

func (r *Report) cpuChart(file string) error {
	p := r.newPlot(r.Scenario+": proxy CPU per request (utime+stime)", "microseconds per request")
	top := 0.0
	for _, res := range r.Results {
		top = max(top, res.Detail.CPUUsPerReq)
	}
	entries, err := r.barsByBase(p, func(res Result) float64 { return res.Detail.CPUUsPerReq })
	if err != nil {
		return err
	}
	p.Y.Min, p.Y.Max = 0, legendRoom(entries)*top
	return r.save(p, file)
}

// legendRoom is how far above the highest bar the Y axis goes, so that the legend in the top
// corner does not hide bars: more entries need more room.
func legendRoom(entries int) float64 {
	return 1.15 + 0.06*float64(entries)
}
