package lab

import (
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

func newTab(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// failoverCharts draws one timeline per fault and advert interval: new connections answered
// per second around the fault, one line per plane (timeline-FAULT-INTERVAL.svg).
func failoverCharts(r *Report, dir string) error {
	type key struct{ fault, iv string }
	var keys []key
	byKey := map[key][]FailoverRow{}
	for _, row := range r.Failover {
		k := key{row.Fault, row.AdvertInterval}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], row)
	}
	for _, k := range keys {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("failover: %s of the master, %s adverts", k.fault, k.iv)
		p.X.Label.Text = "seconds since the fault"
		p.Y.Label.Text = "new connections answered per second"
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = vg.Points(8)
		p.Add(plotter.NewGrid())
		top := 1.0
		for i, row := range byKey[k] {
			if len(row.Timeline) == 0 {
				continue
			}
			pts := make(plotter.XYs, len(row.Timeline))
			for j, n := range row.Timeline {
				pts[j] = plotter.XY{X: float64(j)*foBucket.Seconds() - 0.5, Y: float64(n) / foBucket.Seconds()}
				top = max(top, pts[j].Y)
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(i)
			p.Add(l)
			p.Legend.Add(row.Plane, l)
		}
		fault, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 0, Y: top * 1.15}})
		if err != nil {
			return err
		}
		fault.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(fault)
		p.Y.Min, p.Y.Max = 0, top*1.3
		file := filepath.Join(dir, fmt.Sprintf("timeline-%s-%s.svg", k.fault, k.iv))
		if err := p.Save(18*vg.Centimeter, 10*vg.Centimeter, file); err != nil {
			return fmt.Errorf("lab: chart %s: %w", file, err)
		}
	}
	return nil
}
