// Command wafcorpus measures what the WAF detects (part of `make bench`).
// It replays one request corpus, attacks by category and benign traffic,
// side by side through
//
//   - ours: a real nginx with the agent's Lua tree (agent/luaassets, laid
//     out as testing/wafbench does) and a site whose rule graph is one
//     security_check node with all nine flags on, blocking with 403;
//   - CRS: nginx with ModSecurity v3 and the OWASP Core Rule Set at
//     paranoia level 1, blocking, default anomaly thresholds (Debian's
//     packages; `make bench-deps` installs them);
//   - no WAF: a plain proxy server of the first nginx, which tells the
//     requests nginx itself refuses (left out of the figures) and what
//     proxying alone costs;
//   - flags: a twin of ours that checks the nine flags one node each and
//     says which fired first, to tell why ours blocks what it blocks;
//
// all in front of one loopback origin that answers 200. A request is
// blocked when it does not get the origin's answer. For each category it
// reports the share of attacks each WAF blocks, the share of benign
// requests each blocks (false positives) and each nginx's worker CPU per
// request, from /proc, as testing/wafbench does: ModSecurity runs inside
// its nginx's workers, so their CPU is its cost.
//
// The corpus: SQL injection, XSS and libinjection's known false
// positives from ../shared/corpus/libinjection; the other attack classes
// from testdata/ (written for this program); benign inputs cut from the
// text in /usr/share/doc. Each sample goes into the request a client
// would send with it (request.go lists the shapes; the category's
// sample files say which it takes, in turn). Sampling is seeded, so runs
// on one machine send the same requests. Then one hostile request, grown
// from 512 bytes to 8 KB, through each (growth.go): what a WAF's worst
// input costs it as it grows.
//
// -misses CATEGORY (or "all") prints the samples our WAF lets through,
// or blocks when benign, with what CRS did: the list to work detectors
// from.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"openflare/agent/landing"
	"openflare/agent/luaassets"
	"openflare/testing/benchkit"
	"openflare/testing/luamin"
	"openflare/testing/nstest"
)

var (
	libinjection = flag.String("libinjection", "../shared/corpus/libinjection", "libinjection's data files (sqli-*.txt, xss-*.txt, false_positives.txt)")
	docDir       = flag.String("doc", "/usr/share/doc", "the text benign samples are cut from")
	perFile      = flag.Int("per-file", 500, "at most this many samples from one libinjection file (-1: all)")
	perBenign    = flag.Int("benign", 500, "samples of each benign kind")
	seed         = flag.Uint64("seed", 1, "seed of every sampling choice")
	conns        = flag.Int("conns", 8, "concurrent keep-alive connections per server")
	rounds       = flag.Int("rounds", 3, "replays of each category through each server; CPU figures are the lowest round's")
	jsonOut      = flag.String("json", "", "also write a JSON summary to this file")
	misses       = flag.String("misses", "", `print the samples of this category ("all": every category) our WAF misses or falsely blocks`)
)

func main() {
	flag.Parse()
	os.Exit(nstest.Run(live, nil))
}

func live() int {
	tb := benchkit.NewProgramTB("openflare-wafcorpus")
	defer tb.Close()
	began := time.Now()
	cats, err := loadCorpus()
	if err != nil {
		benchkit.Fatal(err)
	}
	if *misses != "" && *misses != "all" && !slices.ContainsFunc(cats, func(c Category) bool { return c.Name == *misses }) {
		benchkit.Fatal(fmt.Errorf("-misses %s: no such category (%s)", *misses, strings.Join(names(cats), ", ")))
	}
	reqs := make([][][]byte, len(cats))
	for i, c := range cats {
		for _, s := range c.Samples {
			r, err := Request(s)
			if err != nil {
				benchkit.Fatal(err)
			}
			reqs[i] = append(reqs[i], r)
		}
	}

	origin, err := startOrigin()
	if err != nil {
		benchkit.Fatal(err)
	}
	oursNginx, err := startOurs(tb, origin)
	if err != nil {
		benchkit.Fatal(err)
	}
	crsNginx, err := startCRS(tb, origin)
	if err != nil {
		benchkit.Fatal(err)
	}
	targets := []*target{
		{name: "none", addr: noneAddr, pids: oursNginx.WorkerPIDs()},
		{name: "ours", addr: oursAddr, pids: oursNginx.WorkerPIDs()},
		{name: "flags", addr: flagsAddr, pids: oursNginx.WorkerPIDs()},
		{name: "crs", addr: crsAddr, pids: crsNginx.WorkerPIDs()},
	}
	// Every worker compiles its detectors on its first requests; that is
	// not what a request costs.
	for _, t := range targets {
		for i := range cats {
			if _, err := t.run(reqs[i][:min(len(reqs[i]), 20)]); err != nil {
				benchkit.Fatal(err)
			}
		}
	}

	rep := report{Date: time.Now().UTC().Format("2006-01-02"), Seed: *seed, Versions: versions(), Conns: *conns, Rounds: max(1, *rounds)}
	for i, c := range cats {
		row := categoryResult{Name: c.Name, Title: c.Title, Attack: c.Attack, Corpus: fingerprint(c)}
		res := map[string]run{}
		for range max(1, *rounds) {
			for _, t := range targets {
				r, err := t.run(reqs[i])
				if err != nil {
					benchkit.Fatal(fmt.Errorf("%s through %s: %w", c.Name, t.name, err))
				}
				if prev, ok := res[t.name]; ok {
					row.Unstable += changed(prev, r)
					r.answers, r.cpu = prev.answers, min(r.cpu, prev.cpu)
				}
				res[t.name] = r
			}
		}
		row.fill(c, res)
		rep.Categories = append(rep.Categories, row)
		fmt.Fprintf(os.Stderr, "%-17s %4d sent, %4d refused without a WAF; blocked: ours %5.1f %%, CRS %5.1f %%\n",
			c.Name, len(c.Samples), row.Refused, pct(row.Ours.Blocked, row.Samples), pct(row.CRS.Blocked, row.Samples))
	}
	if rep.Growth, err = growth(targets[0], targets[1], targets[3]); err != nil {
		benchkit.Fatal(err)
	}
	rep.Seconds = time.Since(began).Seconds()
	if log := oursNginx.ErrorLog(); strings.Contains(log, "lua") {
		fmt.Fprintf(os.Stderr, "ours: nginx error log has Lua errors (a request that fails closed counts as blocked):\n%s\n", lastLines(log, 20))
	}

	rep.print(os.Stdout)
	fmt.Println()
	printGrowth(os.Stdout, rep.Growth)
	if *jsonOut != "" {
		if err := rep.write(*jsonOut); err != nil {
			benchkit.Fatal(err)
		}
	}
	if *misses != "" {
		printMisses(os.Stdout, cats, rep, *misses)
	}
	return 0
}

// loadCorpus reads every category, attacks first, in report order.
func loadCorpus() ([]Category, error) {
	inj, fp, err := loadLibinjection(os.DirFS(*libinjection), *perFile, *seed)
	if err != nil {
		return nil, fmt.Errorf("libinjection corpus %s: %w", *libinjection, err)
	}
	td, err := fs.Sub(testdata, "testdata")
	if err != nil {
		return nil, err
	}
	own, err := loadOwn(td)
	if err != nil {
		return nil, err
	}
	benign, err := loadBenign(os.DirFS(*docDir), *perBenign, *seed)
	if err != nil {
		return nil, fmt.Errorf("benign samples from %s: %w", *docDir, err)
	}
	return slices.Concat(inj, own, benign, []Category{fp}), nil
}

// changed counts the requests a replay answered otherwise than before
// (passed one time, blocked the other): a verdict that changes is no
// verdict to report.
func changed(a, b run) int {
	n := 0
	for i := range a.answers {
		if a.answers[i].passed() != b.answers[i].passed() {
			n++
		}
	}
	return n
}

func names(cats []Category) []string {
	var out []string
	for _, c := range cats {
		out = append(out, c.Name)
	}
	return out
}

// fingerprint identifies a category's requests, so that figures of two
// runs are known to be of the same input (the benign ones depend on the
// packages installed).
func fingerprint(c Category) string {
	h := sha256.New()
	for _, s := range c.Samples {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", s.Shape, s.Filename, s.FileType, s.Text)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// versions names what was measured: the WAF code as the agent would
// install it, nginx, ModSecurity and the rules.
func versions() map[string]string {
	v := map[string]string{}
	for _, f := range luaassets.Files(landing.Paths{}.LuaReplacer()) {
		if f.Path == "waf/security.lua" {
			sum := sha256.Sum256(f.Content)
			v["security.lua sha256"] = hex.EncodeToString(sum[:])[:16]
			// The agent embeds a packed copy of agent/luaassets/lua, its
			// comments stripped; when run from the repository, say if the
			// two differ, since what runs here is the pack.
			if tree, err := os.ReadFile(filepath.Join("agent", "luaassets", "lua", f.Path)); err == nil && luamin.Strip(string(tree)) != string(f.Content) {
				v["security.lua"] = "embedded pack differs from agent/luaassets/lua (run `go generate ./agent/luaassets`): the pack was measured"
			}
		}
	}
	if out, err := exec.Command("nginx", "-v").CombinedOutput(); err == nil {
		v["nginx"] = strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: nginx/")
	}
	for _, p := range []string{"libmodsecurity3", "libnginx-mod-http-modsecurity", "modsecurity-crs"} {
		if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", p).Output(); err == nil {
			v[p] = string(out)
		}
	}
	return v
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// write saves the report as JSON.
func (r report) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
