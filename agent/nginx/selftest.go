package nginx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"time"
)

// ErrProbe marks a data plane that took its config but cannot serve: the
// workers answer the self-probe with a failure, or not at all. It is a
// problem of this node (file access, a worker that cannot start), so the
// version is not blocklisted for it.
var ErrProbe = errors.New("data-plane probe failed")

// probeWait bounds how long the probe waits for an answer: new workers are
// confirmed before it runs, so this only covers a slow first request.
const probeWait = 5 * time.Second

// LogMark is the error log's current size: errors logged after it belong
// to what happens next.
func (n *Ctl) LogMark() int64 { return fileSize(n.ErrorLog) }

// SelfTest sends one request through the running data plane to the
// agent's probe location (a loopback listener the landed main config
// carries) and checks the answer. The error wraps ErrProbe and quotes the
// probe's own report and the nginx error-log lines written since mark,
// which name the file and the reason (e.g. "Permission denied").
func (n *Ctl) SelfTest(ctx context.Context, mark int64) error {
	if n.ProbeURL == "" {
		n.previous = generation0{}
		return nil
	}
	main, err := os.ReadFile(n.MainConfig)
	if err == nil && !strings.Contains(string(main), ProbeMarker) {
		// A config landed by an older release, or a template whose http
		// block the agent could not find: there is nothing to ask.
		if n.Log != nil {
			n.Log.Warn("the running config has no self-probe listener; not probed", "config", n.MainConfig)
		}
		n.previous = generation0{}
		return nil
	}
	want, url := "ok", n.ProbeURL
	if gen := generation(main); gen != "" {
		want += " " + gen
		url = probeURL(main, url)
	}
	client := &http.Client{
		Timeout: probeWait,
		// The probe never goes anywhere but the loopback listener.
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(probeWait)
	var last error
	for {
		last = n.probeOnce(ctx, client, url, want)
		if last == nil {
			n.handover(ctx)
			return nil
		}
		if !errors.Is(last, errNotListening) && !errors.Is(last, errOldGeneration) || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("%w: interrupted: %v", ErrProbe, err)
		}
	}
	msg := last.Error()
	if logged := distinct(probeLines(n.logSince(mark, "[emerg]", "[crit]", "[error]")), 4); logged != "" {
		msg += "; nginx error log: " + logged
	}
	return fmt.Errorf("%w: %s", ErrProbe, msg)
}

// ProbeMarker is in every main config that carries the probe listener.
const ProbeMarker = "server_name openflare-agent-probe;"

// probeLines keeps the error-log lines about the probe itself or about
// workers that could not initialise; a busy node's other errors (an
// origin down) say nothing about the probe.
func probeLines(lines string) string {
	var keep []string
	for _, l := range strings.Split(lines, "; ") {
		if strings.Contains(l, "[emerg]") || strings.Contains(l, "[crit]") ||
			strings.Contains(l, "openflare-agent-probe") || strings.Contains(l, "init_worker_by_lua") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; ")
}

// distinct keeps the first max log lines that differ once the time stamp
// and pid are set aside: every worker logs the same failure.
func distinct(lines string, max int) string {
	seen := map[string]bool{}
	var keep []string
	for _, l := range strings.Split(lines, "; ") {
		key := l
		if i := strings.Index(l, "#"); i >= 0 {
			if j := strings.Index(l[i:], ": "); j >= 0 {
				key = l[i+j:]
			}
		}
		if l == "" || seen[key] {
			continue
		}
		seen[key] = true
		if keep = append(keep, l); len(keep) == max {
			break
		}
	}
	return strings.Join(keep, "; ")
}

var (
	errNotListening  = errors.New("probe listener not answering")
	errOldGeneration = errors.New("a worker of the previous configuration answered")
)

// generationLine starts the probe server's generation line in a landed
// main config (landing.GenerationPrefix).
const generationLine = `set $openflare_generation "`

// probeURL is base with its host and port replaced by the probe server's
// listen address in main (each generation listens on an address of its
// own), or base when main names none.
func probeURL(main []byte, base string) string {
	head, _, ok := strings.Cut(string(main), ProbeMarker)
	if !ok {
		return base
	}
	i := strings.LastIndex(head, "listen ")
	if i < 0 {
		return base
	}
	addr, _, ok := strings.Cut(head[i+len("listen "):], ";")
	u, err := neturl.Parse(base)
	if !ok || err != nil || strings.ContainsAny(addr, " \t\n") {
		return base
	}
	u.Host = addr
	return u.String()
}

// generation is the generation a landed main config names, or "".
func generation(main []byte) string {
	_, rest, ok := strings.Cut(string(main), generationLine)
	if !ok {
		return ""
	}
	gen, _, ok := strings.Cut(rest, `"`)
	if !ok {
		return ""
	}
	return gen
}

// probeOnce asks once; want is the answer of a healthy worker of the
// landed configuration ("ok <generation>").
func (n *Ctl) probeOnce(ctx context.Context, client *http.Client, url, want string) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Host = "openflare-agent-probe"
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotListening, err)
	}
	defer resp.Body.Close()
	// One line per failing file; a few dozen lines say everything.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode == http.StatusOK && text == want {
		return nil
	}
	if want != "ok" && resp.StatusCode != http.StatusInternalServerError {
		// Not the probe's own failure report: a worker of the previous
		// configuration answered (with its generation, or, where the
		// template listens on the port by wildcard and nginx binds only
		// that, from its default server). It accepts until it takes the
		// master's signal to leave.
		return fmt.Errorf("%w (%d %q, want %q)", errOldGeneration, resp.StatusCode, text, want)
	}
	return fmt.Errorf("GET %s answered %d: %s", url, resp.StatusCode, strings.ReplaceAll(text, "\n", "; "))
}
