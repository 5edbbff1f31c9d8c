package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// lineplot is a simple line plot written as SVG by hand: a few series
// over a shared x axis, logarithmic when the x values span decades.
type lineplot struct {
	title, xlabel, ylabel string
	logx                  bool
	series                []series
}

type series struct {
	name string
	x, y []float64
}

const (
	plotW, plotH = 640, 360
	padL, padR   = 70, 170
	padT, padB   = 40, 50
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// bounds are the data's ranges: x as plotted (log10 when logx), y from 0.
func (p *lineplot) bounds() (x0, x1, y1 float64) {
	x0, x1 = math.Inf(1), math.Inf(-1)
	for _, s := range p.series {
		for i := range s.x {
			x := p.xv(s.x[i])
			x0, x1, y1 = min(x0, x), max(x1, x), max(y1, s.y[i])
		}
	}
	if x1 <= x0 {
		x0, x1 = x0-1, x0+1
	}
	if y1 <= 0 {
		y1 = 1
	}
	return x0, x1, niceCeil(y1 * 1.05)
}

func (p *lineplot) xv(x float64) float64 {
	if p.logx {
		return math.Log10(max(x, 1e-9))
	}
	return x
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func (p *lineplot) write(w io.Writer) error {
	x0, x1, y1 := p.bounds()
	iw, ih := float64(plotW-padL-padR), float64(plotH-padT-padB)
	px := func(x float64) float64 { return padL + (p.xv(x)-x0)/(x1-x0)*iw }
	py := func(y float64) float64 { return padT + ih - y/y1*ih }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(p.title))
	for i := 0; i <= 4; i++ { // y grid
		y := y1 * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			padL, padL+iw, py(y), py(y), padL-6, py(y)+4, tick(y))
	}
	for _, x := range p.xticks() {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			px(x), px(x), padT, padT+ih, px(x), padT+ih+16, tick(x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", padL, padT, iw, ih)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", padL+iw/2, plotH-10, html.EscapeString(p.xlabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padT+ih/2, html.EscapeString(p.ylabel))
	for i, s := range p.series {
		c := palette[i%len(palette)]
		var pts []string
		for j := range s.x {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.x[j]), py(s.y[j])))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(s.x[j]), py(s.y[j]), c)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		ly := padT + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%.0f" y="%d">%s</text>`+"\n",
			padL+iw+12, padL+iw+32, ly, ly, c, padL+iw+38, ly+4, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// xticks are the data's distinct x values (a load run's sizes), in the
// plot's coordinates' order.
func (p *lineplot) xticks() []float64 {
	seen := map[float64]bool{}
	var out []float64
	for _, s := range p.series {
		for _, x := range s.x {
			if !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		}
	}
	return out
}

func tick(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
