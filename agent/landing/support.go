package landing

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	"openflare/agent/render"
)

// legacyPowConfig is never shipped by a current server; a copy left on a
// node is removed (PROTOCOL 6.1).
const legacyPowConfig = "pow_config.json"

// Placement is where one support file lands and with which mode. landing
// owns these rules for applies, staged validation and the render command.
type Placement struct {
	Rel string // clean relative path under its directory
	// Runtime files go to runtime_config_dir, the rest to cert_dir.
	Runtime bool
	Mode    fs.FileMode
	// Skip marks a file that is never landed.
	Skip bool
}

// Place decides where a support file named p goes (PROTOCOL 6.1). A name
// that would leave its directory ("../x", "/etc/x") from a compromised or
// buggy server is an error.
func Place(p string) (Placement, error) {
	switch p {
	case render.WAFConfigFile:
		// Read by the workers' WAF runtime.
		return Placement{Rel: p, Runtime: true, Mode: 0o644}, nil
	case render.SourceConfigFile:
		// The raw source keeps basic-auth passwords in clear text.
		return Placement{Rel: p, Runtime: true, Mode: 0o600}, nil
	case legacyPowConfig:
		return Placement{Rel: p, Runtime: true, Mode: 0o644, Skip: true}, nil
	}
	rel, err := cleanRel(p)
	if err != nil {
		return Placement{}, fmt.Errorf("support file %q: %w", p, err)
	}
	mode := fs.FileMode(0o644)
	if strings.HasSuffix(rel, ".key") {
		// Read by nginx's master only.
		mode = 0o600
	}
	return Placement{Rel: rel, Mode: mode}, nil
}

// Path is where the placement lands under p.
func (pl Placement) Path(p Paths) string {
	if pl.Runtime {
		return filepath.Join(p.RuntimeConfigDir, pl.Rel)
	}
	return filepath.Join(p.CertDir, pl.Rel)
}

// cleanRel accepts only a relative slash path that stays inside its
// directory, and names no control character: a newline or an escape
// sequence in a file name would forge the log lines and events that name
// it.
func cleanRel(p string) (string, error) {
	if p == "" || strings.ContainsAny(p, "\\\x00") || path.IsAbs(p) {
		return "", fmt.Errorf("not a relative path")
	}
	if strings.IndexFunc(p, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("has a control character")
	}
	c := path.Clean(p)
	if c != p || c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path escapes its directory or is not clean")
	}
	return filepath.FromSlash(c), nil
}
