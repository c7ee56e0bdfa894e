// Command of-controlplane runs the test control plane (package
// testing/controlplane) and drives it through its admin API.
//
//	of-controlplane serve -addr 127.0.0.1:9080 [-discovery-token T] [-admin-token A]
//	of-controlplane publish -source file.json [-support dir] [-checksum C]
//	of-controlplane activate -version V
//	of-controlplane ip-group -id N -ips a,b,c [-name X] [-type manual] [-disabled]
//	of-controlplane fault -path P [-status 500] [-times N] [-delay 2s] [-truncate] [-oversize N] [-drop] [-garbage]
//	of-controlplane add-node [-name X]
//	of-controlplane settings [-node ID] -json '{"update_now":true}'
//	of-controlplane force-sync -node ID
//	of-controlplane state
//
// Client commands take -server (default $OF_CONTROLPLANE_URL, else
// http://127.0.0.1:9080) and -admin-token (default $OF_CONTROLPLANE_ADMIN_TOKEN).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"openflare/agent/protocol"
	"openflare/testing/controlplane"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "of-controlplane:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: of-controlplane serve|publish|activate|ip-group|fault|add-node|settings|force-sync|state [flags]")
	}
	cmd, args := args[0], args[1:]
	if cmd == "serve" {
		return serve(ctx, args, stdout, stderr)
	}
	fl := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fl.SetOutput(stderr)
	c := client{out: stdout}
	fl.StringVar(&c.server, "server", envOr("OF_CONTROLPLANE_URL", "http://127.0.0.1:9080"), "control plane URL")
	fl.StringVar(&c.token, "admin-token", os.Getenv("OF_CONTROLPLANE_ADMIN_TOKEN"), "admin token")
	switch cmd {
	case "publish":
		source := fl.String("source", "", "source_config_json file (required)")
		support := fl.String("support", "", "directory of support files (paths relative to it)")
		checksum := fl.String("checksum", "", "publish with this checksum instead of rendering")
		return c.run(fl, args, func() error {
			src, err := os.ReadFile(*source)
			if err != nil {
				return fmt.Errorf("read source: %w", err)
			}
			req := controlplane.AdminPublishRequest{SourceJSON: string(src), Checksum: *checksum}
			if *support != "" {
				if req.SupportFiles, err = readSupport(*support); err != nil {
					return err
				}
			}
			return c.do(http.MethodPost, controlplane.AdminPathPublish, req)
		})
	case "activate":
		version := fl.String("version", "", "version to activate (required)")
		return c.run(fl, args, func() error {
			return c.do(http.MethodPost, controlplane.AdminPathActivate, protocol.ConfigRef{Version: *version})
		})
	case "ip-group":
		var g protocol.WAFIPGroup
		fl.Uint64Var(&g.ID, "id", 0, "group id (required)")
		fl.StringVar(&g.Name, "name", "", "group name")
		fl.StringVar(&g.Type, "type", "manual", "manual, automatic or subscription")
		ips := fl.String("ips", "", "comma-separated IPs and CIDRs")
		disabled := fl.Bool("disabled", false, "disable the group")
		return c.run(fl, args, func() error {
			g.Enabled = !*disabled
			g.IPList = []string{}
			for ip := range strings.SplitSeq(*ips, ",") {
				if ip = strings.TrimSpace(ip); ip != "" {
					g.IPList = append(g.IPList, ip)
				}
			}
			return c.do(http.MethodPost, controlplane.AdminPathIPGroups, g)
		})
	case "fault":
		var f controlplane.AdminFaultRequest
		fl.StringVar(&f.Path, "path", "", "endpoint path, e.g. /api/v1/agent/nodes/heartbeat (empty: any)")
		fl.IntVar(&f.Times, "times", 1, "how many requests it hits")
		fl.IntVar(&f.Status, "status", 0, "reply with this status")
		delay := fl.Duration("delay", 0, "sleep before answering")
		fl.BoolVar(&f.Truncate, "truncate", false, "cut the body in half")
		fl.Int64Var(&f.Oversize, "oversize", 0, "answer with a JSON body of this many bytes")
		fl.BoolVar(&f.Drop, "drop", false, "close the connection without a reply")
		fl.BoolVar(&f.Garbage, "garbage", false, "answer 200 with a non-JSON body")
		return c.run(fl, args, func() error {
			if *delay > 0 {
				f.Delay = delay.String()
			}
			return c.do(http.MethodPost, controlplane.AdminPathFault, f)
		})
	case "add-node":
		name := fl.String("name", "", "node name")
		return c.run(fl, args, func() error {
			return c.do(http.MethodPost, controlplane.AdminPathNodes, map[string]string{"name": *name})
		})
	case "settings":
		node := fl.String("node", "", "node id (empty: global settings)")
		settings := fl.String("json", "", `settings to change, e.g. {"update_now":true}`)
		return c.run(fl, args, func() error {
			return c.do(http.MethodPost, controlplane.AdminPathSettings,
				controlplane.AdminSettingsRequest{NodeID: *node, Settings: json.RawMessage(*settings)})
		})
	case "force-sync":
		node := fl.String("node", "", "node id (required)")
		return c.run(fl, args, func() error {
			return c.do(http.MethodPost, controlplane.AdminPathForceSync, map[string]string{"node_id": *node})
		})
	case "state":
		return c.run(fl, args, func() error { return c.do(http.MethodGet, controlplane.AdminPathState, nil) })
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// serve runs the control plane until ctx ends or SIGINT/SIGTERM arrives.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("serve", flag.ContinueOnError)
	fl.SetOutput(stderr)
	addr := fl.String("addr", "127.0.0.1:9080", "listen address")
	discovery := fl.String("discovery-token", "", "discovery token (default: random)")
	admin := fl.String("admin-token", "", "admin token (default: random)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	s := controlplane.New()
	s.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	if *discovery != "" {
		s.SetDiscoveryToken(*discovery)
	}
	if *admin != "" {
		s.SetAdminToken(*admin)
	}
	if err := s.StartAt(*addr); err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(stdout, "url=%s\ndiscovery_token=%s\nadmin_token=%s\n", s.URL(), s.DiscoveryToken(), s.AdminToken())
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

// client calls the admin API and prints the reply's data.
type client struct {
	server, token string
	out           io.Writer
}

func (c client) run(fl *flag.FlagSet, args []string, f func() error) error {
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fl.Name(), fl.Args())
	}
	return f()
}

func (c client) do(method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimRight(c.server, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(controlplane.AdminHeader, c.token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read reply: %w", method, path, err)
	}
	var env protocol.Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if resp.StatusCode != http.StatusOK || env.ErrorMsg != "" {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, env.ErrorMsg)
	}
	if string(env.Data) == "null" {
		return nil
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, env.Data, "", "  "); err != nil {
		return fmt.Errorf("%s %s: reply data: %w", method, path, err)
	}
	pretty.WriteByte('\n')
	_, err = c.out.Write(pretty.Bytes())
	return err
}

// readSupport loads every regular file under dir as a support file named by
// its slash-separated path relative to dir.
func readSupport(dir string) ([]protocol.SupportFile, error) {
	var files []protocol.SupportFile
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, protocol.SupportFile{Path: filepath.ToSlash(rel), Content: string(b)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read support files: %w", err)
	}
	return files, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
