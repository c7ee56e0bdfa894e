package main

// The growth series: what one hostile request costs each WAF as it grows.
// Its query value is a run of the bytes detectors stop at, doubling from
// 512 bytes to what nginx's default 8 KB request line holds. Ours is one
// linear pass per decoder and detector, so its cost doubles with the
// size; some of the Core Rule Set's regular expressions backtrack, and a
// run of "<" costs ModSecurity about eight times more at each doubling.
// A series stops after the first request that cost a WAF more than
// growthStop: the next could outlast the client's 30 s deadline and leave
// a worker busy under the next measurement.

import (
	"fmt"
	"io"
	"strings"
	"time"

	"openflare/testing/benchkit"
)

const growthStop = 250 * time.Millisecond

// growthUnits are the runs: a quote, a parenthesis, an angle bracket, and
// all of them interleaved with letters and a separator.
var growthUnits = []string{"'", "(", "<", `a'b(c<d;e"f`}

// growthSizes are the request lines, up to nginx's default 8 KB buffer.
var growthSizes = []int{512, 1024, 2048, 4096, 7900}

// A growthPoint is one request through the three servers.
type growthPoint struct {
	Unit  string `json:"unit"`
	Bytes int    `json:"bytes"`
	// The workers' CPU for the request (µs); -1 when the series had
	// stopped for that server.
	None float64 `json:"no_waf_cpu_us"`
	Ours float64 `json:"ours_cpu_us"`
	CRS  float64 `json:"crs_cpu_us"`
	// The statuses (0 when not sent).
	OursStatus int `json:"ours_status"`
	CRSStatus  int `json:"crs_status"`
}

// growthRequest is a GET whose query value is unit repeated to fill a
// request line of about n bytes; ";" and '"' are escaped, the rest sent
// as is (nginx takes them in a request line).
func growthRequest(unit string, n int) []byte {
	enc := strings.NewReplacer(";", "%3B", `"`, "%22").Replace(unit)
	target := "/search?q="
	target += strings.Repeat(enc, (n-len(target)-len(" HTTP/1.1"))/len(enc))
	return fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: %s\r\n\r\n", target, Host, browserUA)
}

// cost is the workers' CPU for req at t, sent over one kept-alive
// connection, the lowest of tries, and its status. The workers are idle
// on either side of each request (benchkit.SettledRunTime): the connection
// opens before and closes after, uncounted.
func (t *target) cost(req []byte, tries int) (time.Duration, int, error) {
	c, err := dial(t.addr)
	if err != nil {
		return 0, 0, err
	}
	defer func() { c.close() }()
	var best time.Duration
	status := 0
	for i := range tries {
		before, err := benchkit.SettledRunTime(t.pids)
		if err != nil {
			return 0, 0, err
		}
		a, err := c.do(req)
		if err != nil {
			return 0, 0, err
		}
		after, err := benchkit.SettledRunTime(t.pids)
		if err != nil {
			return 0, 0, err
		}
		if d := after - before; i == 0 || d < best {
			best = d
		}
		status = a.status
		if c.closing && i+1 < tries {
			c.close()
			if c, err = dial(t.addr); err != nil {
				return 0, 0, err
			}
		}
	}
	return best, status, nil
}

// growth runs every series through none, ours and crs.
func growth(none, ours, crs *target) ([]growthPoint, error) {
	var out []growthPoint
	for _, unit := range growthUnits {
		// the last cost at each WAF, and whether its series goes on
		type series struct {
			t    *target
			last time.Duration
			on   bool
		}
		wafs := []*series{{t: ours, on: true}, {t: crs, on: true}}
		for _, n := range growthSizes {
			req := growthRequest(unit, n)
			d, _, err := none.cost(req, 3)
			if err != nil {
				return nil, err
			}
			p := growthPoint{Unit: unit, Bytes: len(req), None: micros(d), Ours: -1, CRS: -1}
			for i, s := range wafs {
				if !s.on {
					continue
				}
				// One try is enough once a request costs milliseconds.
				tries := 3
				if s.last > 10*time.Millisecond {
					tries = 1
				}
				d, status, err := s.t.cost(req, tries)
				if err != nil {
					return nil, fmt.Errorf("%s, %d bytes of %q: %w", s.t.name, len(req), unit, err)
				}
				s.last, s.on = d, d <= growthStop
				if i == 0 {
					p.Ours, p.OursStatus = micros(d), status
				} else {
					p.CRS, p.CRSStatus = micros(d), status
				}
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// printGrowth is the series as a table.
func printGrowth(w io.Writer, points []growthPoint) {
	fmt.Fprintln(w, "One hostile request as it grows: worker CPU (the status when not 200); a series stops once a request costs a WAF more than", growthStop)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| query value, a run of | request bytes | no WAF | ours | CRS |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|")
	cell := func(us float64, status int) string {
		if us < 0 {
			return "–"
		}
		s := fmt.Sprintf("%.0f µs", us)
		if us >= 10000 {
			s = fmt.Sprintf("%.0f ms", us/1000)
		}
		if status != 200 {
			s += fmt.Sprintf(" (%d)", status)
		}
		return s
	}
	for _, p := range points {
		fmt.Fprintf(w, "| `%s` | %d | %s | %s | %s |\n", p.Unit, p.Bytes, cell(p.None, 200), cell(p.Ours, p.OursStatus), cell(p.CRS, p.CRSStatus))
	}
}
