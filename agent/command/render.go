package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"openflare/agent/landing"
	"openflare/agent/protocol"
	"openflare/agent/render"
	"openflare/internal/cliflag"
)

// Render renders an E4 reply (its data object or the whole envelope)
// into DIR: nginx.conf and openflare_routes.conf with placeholders intact,
// as the server checksums them, and the support files under files/.
func Render(args []string, stdout, stderr io.Writer) int {
	fs := cliflag.New("render", stderr)
	snapshot := fs.String("snapshot", "", "E4 reply (JSON) to render")
	out := fs.String("out", "", "directory to write the rendered files to")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if *snapshot == "" || *out == "" {
		fmt.Fprintln(stderr, "usage: openflare-agent render -snapshot active.json -out DIR")
		return ExitUsage
	}
	ac, err := readSnapshot(*snapshot)
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	o, err := render.Config(ac.SourceConfigJSON, ac.SupportFiles)
	if err != nil {
		fmt.Fprintf(stderr, "error: render version %s: %v\n", ac.Version, err)
		return 1
	}
	// The configs as the server checksums them; support files keep the
	// server's names under files/, each with the mode it lands with.
	files := []landing.File{{Path: "nginx.conf", Data: []byte(o.Main), Mode: 0o644}, {Path: "openflare_routes.conf", Data: []byte(o.Route), Mode: 0o644}}
	for _, f := range o.Files {
		pl, err := landing.Place(f.Path)
		if err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		files = append(files, landing.File{Path: filepath.Join("files", filepath.FromSlash(f.Path)), Data: []byte(f.Content), Mode: pl.Mode})
	}
	for _, f := range files {
		p := filepath.Join(*out, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			fmt.Fprintln(stderr, "error:", err)
			return 1
		}
	}
	sum := o.Checksum()
	fmt.Fprintf(stdout, "rendered version %s into %s (%d support files)\n", ac.Version, *out, len(o.Files))
	if sum == ac.Checksum {
		fmt.Fprintf(stdout, "checksum matches: %s\n", sum)
	} else {
		fmt.Fprintf(stdout, "checksum MISMATCH: rendered %s, server %s\n", sum, ac.Checksum)
	}
	return 0
}

func readSnapshot(path string) (*protocol.ActiveConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env protocol.Envelope
	if json.Unmarshal(data, &env) == nil && len(env.Data) > 0 && string(env.Data) != "null" {
		data = env.Data
	}
	var ac protocol.ActiveConfig
	if err := json.Unmarshal(data, &ac); err != nil {
		return nil, fmt.Errorf("%s: not an E4 reply: %w", path, err)
	}
	if ac.SourceConfigJSON == "" {
		return nil, errors.New(path + ": no source_config_json")
	}
	return &ac, nil
}
