package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// report is what a run found; its JSON form is the -json summary.
type report struct {
	Date       string            `json:"date"`
	Seconds    float64           `json:"seconds"`
	Seed       uint64            `json:"seed"`
	Conns      int               `json:"conns"`
	Rounds     int               `json:"rounds"`
	Versions   map[string]string `json:"versions"`
	Categories []categoryResult  `json:"categories"`
	Growth     []growthPoint     `json:"growth"`
}

type categoryResult struct {
	Name   string `json:"name"`
	Title  string `json:"title"`
	Attack bool   `json:"attack"`
	Corpus string `json:"corpus"` // fingerprint of the requests
	// Samples counts those nginx without a WAF passes to the origin;
	// Refused the others (left out of every figure).
	Samples int `json:"samples"`
	Refused int `json:"refused_without_waf"`
	// Unstable counts verdicts that changed between rounds.
	Unstable int           `json:"unstable_verdicts"`
	Ours     wafResult     `json:"ours"`
	CRS      wafResult     `json:"crs"`
	NoWAF    float64       `json:"no_waf_cpu_us_per_request"`
	Shapes   []shapeResult `json:"shapes"`
	// OursFlags counts the samples ours blocks by the first flag that
	// fires.
	OursFlags map[string]int `json:"ours_blocked_by"`
	// verdicts are per sample (false for refused ones): blocked by ours,
	// by CRS, and the flag; for -misses.
	ours, crs, counted []bool
	flag               []string
}

type wafResult struct {
	// Blocked counts samples that did not get the origin's answer:
	// attacks caught, or benign inputs falsely blocked.
	Blocked int `json:"blocked"`
	// Statuses counts the answers by HTTP status.
	Statuses map[string]int `json:"statuses"`
	CPU      float64        `json:"cpu_us_per_request"`
}

type shapeResult struct {
	Shape       string `json:"shape"`
	Samples     int    `json:"samples"`
	OursBlocked int    `json:"ours_blocked"`
	CRSBlocked  int    `json:"crs_blocked"`
}

// fill computes the row from the three runs of c's requests.
func (r *categoryResult) fill(c Category, res map[string]run) {
	none := res["none"]
	r.NoWAF = perRequest(none)
	shapes := map[string]*shapeResult{}
	r.ours, r.crs, r.counted, r.flag = make([]bool, len(c.Samples)), make([]bool, len(c.Samples)), make([]bool, len(c.Samples)), make([]string, len(c.Samples))
	r.Ours.Statuses, r.CRS.Statuses, r.OursFlags = map[string]int{}, map[string]int{}, map[string]int{}
	for i, s := range c.Samples {
		if !none.answers[i].passed() {
			r.Refused++
			continue
		}
		r.counted[i] = true
		r.Samples++
		sh := shapes[s.Shape]
		if sh == nil {
			sh = &shapeResult{Shape: s.Shape}
			shapes[s.Shape] = sh
		}
		sh.Samples++
		for _, w := range []struct {
			run     run
			res     *wafResult
			blocked []bool
			count   *int
		}{{res["ours"], &r.Ours, r.ours, &sh.OursBlocked}, {res["crs"], &r.CRS, r.crs, &sh.CRSBlocked}} {
			a := w.run.answers[i]
			w.res.Statuses[strconv.Itoa(a.status)]++
			if !a.passed() {
				w.res.Blocked++
				w.blocked[i] = true
				*w.count++
			}
		}
		if r.ours[i] {
			// The twin passing what ours blocks would be a bug of the
			// runtime (or a failure, such as a 500): "?".
			f, ok := strings.CutPrefix(strings.TrimSpace(res["flags"].answers[i].body), flagPrefix)
			if !ok {
				f = "?"
			}
			r.flag[i] = f
			r.OursFlags[f]++
		}
	}
	r.Ours.CPU, r.CRS.CPU = perRequest(res["ours"]), perRequest(res["crs"])
	for _, k := range slices.Sorted(maps.Keys(shapes)) {
		r.Shapes = append(r.Shapes, *shapes[k])
	}
}

// perRequest is the run's worker CPU in µs per request sent.
func perRequest(r run) float64 {
	if len(r.answers) == 0 {
		return 0
	}
	return float64(r.cpu.Nanoseconds()) / 1e3 / float64(len(r.answers))
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

// print writes the Markdown tables and the notes under them.
func (r report) print(w io.Writer) {
	fmt.Fprintln(w, "| category | samples | ours blocked | CRS blocked | ours FP | CRS FP | ours µs/req | CRS µs/req | no WAF µs/req |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, attack := range []bool{true, false} {
		var total categoryResult
		var oursCPU, crsCPU, noneCPU float64
		for _, c := range r.Categories {
			if c.Attack != attack {
				continue
			}
			r.row(w, c.Title, c)
			total.Samples += c.Samples
			total.Ours.Blocked += c.Ours.Blocked
			total.CRS.Blocked += c.CRS.Blocked
			n := float64(c.Samples + c.Refused)
			oursCPU += c.Ours.CPU * n
			crsCPU += c.CRS.CPU * n
			noneCPU += c.NoWAF * n
			total.Refused += c.Refused
		}
		n := float64(total.Samples + total.Refused)
		total.Attack = attack
		total.Ours.CPU, total.CRS.CPU, total.NoWAF = oursCPU/n, crsCPU/n, noneCPU/n
		label := "**all attacks**"
		if !attack {
			label = "**all benign**"
		}
		r.row(w, label, total)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "By request shape (request.go):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| category | shape | samples | ours blocked | CRS blocked |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|")
	for _, c := range r.Categories {
		if len(c.Shapes) < 2 {
			continue
		}
		for _, s := range c.Shapes {
			fmt.Fprintf(w, "| %s | %s | %d | %.1f %% | %.1f %% |\n", c.Name, s.Shape, s.Samples, pct(s.OursBlocked, s.Samples), pct(s.CRSBlocked, s.Samples))
		}
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "What ours blocks with (the first flag that fires):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| category | blocked by |")
	fmt.Fprintln(w, "|---|---|")
	for _, c := range r.Categories {
		if len(c.OursFlags) == 0 {
			continue
		}
		byCount := slices.Sorted(maps.Keys(c.OursFlags))
		slices.SortStableFunc(byCount, func(a, b string) int { return c.OursFlags[b] - c.OursFlags[a] })
		var l []string
		for _, f := range byCount {
			l = append(l, fmt.Sprintf("%s %d", f, c.OursFlags[f]))
		}
		fmt.Fprintf(w, "| %s | %s |\n", c.Name, strings.Join(l, ", "))
	}

	fmt.Fprintln(w)
	var refused []string
	for _, c := range r.Categories {
		if c.Refused > 0 {
			refused = append(refused, fmt.Sprintf("%s %d", c.Name, c.Refused))
		}
	}
	if len(refused) > 0 {
		fmt.Fprintf(w, "Left out, as nginx without a WAF already refuses them: %s.\n", strings.Join(refused, ", "))
	}
	for _, c := range r.Categories {
		if c.Unstable > 0 {
			fmt.Fprintf(w, "%s: %d verdicts changed between rounds.\n", c.Name, c.Unstable)
		}
	}
	for _, waf := range []string{"ours", "CRS"} {
		odd := map[string]int{}
		for _, c := range r.Categories {
			st := c.Ours.Statuses
			if waf == "CRS" {
				st = c.CRS.Statuses
			}
			for k, n := range st {
				if k != "200" && k != "403" {
					odd[k] += n
				}
			}
		}
		if len(odd) > 0 {
			var l []string
			for _, k := range slices.Sorted(maps.Keys(odd)) {
				l = append(l, fmt.Sprintf("%d × %s", odd[k], k))
			}
			fmt.Fprintf(w, "%s answered other than 200 or 403 (counted as blocked): %s.\n", waf, strings.Join(l, ", "))
		}
	}
	var v []string
	for _, k := range slices.Sorted(maps.Keys(r.Versions)) {
		v = append(v, k+" "+r.Versions[k])
	}
	fmt.Fprintf(w, "%s; %s; seed %d, %d connections per server, CPU the lowest of %d rounds, %.0f s.\n", r.Date, strings.Join(v, ", "), r.Seed, r.Conns, r.Rounds, r.Seconds)
}

func (r report) row(w io.Writer, label string, c categoryResult) {
	dash := "–"
	ob, cb, of, cf := dash, dash, dash, dash
	o, k := fmt.Sprintf("%.1f %%", pct(c.Ours.Blocked, c.Samples)), fmt.Sprintf("%.1f %%", pct(c.CRS.Blocked, c.Samples))
	if c.Attack {
		ob, cb = o, k
	} else {
		of, cf = o, k
	}
	fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %.0f | %.0f | %.0f |\n", label, c.Samples, ob, cb, of, cf, c.Ours.CPU, c.CRS.CPU, c.NoWAF)
}

// printMisses lists, for the category named (or every one), the attacks
// ours lets through and the benign inputs it blocks, each with what CRS
// did.
func printMisses(w io.Writer, cats []Category, r report, name string) {
	for i, c := range cats {
		if name != "all" && c.Name != name {
			continue
		}
		res := r.Categories[i]
		what := "missed"
		if !c.Attack {
			what = "falsely blocked"
		}
		var lines []string
		crsToo := 0
		for j, s := range c.Samples {
			if !res.counted[j] || res.ours[j] != !c.Attack {
				continue
			}
			crs := "CRS passes"
			if res.crs[j] {
				crs = "CRS blocks"
			}
			if res.flag[j] != "" {
				crs += ", ours: " + res.flag[j]
			}
			if res.crs[j] == c.Attack {
				crsToo++
			}
			text := s.Text
			if s.Filename != "" {
				text = s.Filename + " (" + s.FileType + "): " + text
			}
			lines = append(lines, fmt.Sprintf("%-32s  %-22s  %-30s  %q", crs, s.Shape, s.Source, text))
		}
		other := "CRS blocks"
		if !c.Attack {
			other = "CRS passes"
		}
		fmt.Fprintf(w, "\n## %s: %d of %d %s by ours (%s %d of them)\n\n", c.Name, len(lines), res.Samples, what, other, crsToo)
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}
