package updater

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// release is the part of a GitHub release object the updater reads.
type release struct {
	TagName    string  `json:"tag_name"`
	Draft      bool    `json:"draft"`
	Prerelease bool    `json:"prerelease"`
	Assets     []asset `json:"assets"`
}

type asset struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	URL    string `json:"browser_download_url"`
	Digest string `json:"digest"`
}

// Caps on what the release API and the small assets may send.
const (
	maxReleaseJSON = 4 << 20
	maxDigestFile  = 64 << 10 // PROTOCOL 10
	maxSigFile     = 4 << 10
)

// lookup finds the release a trigger names (PROTOCOL 10): an exact tag,
// the newest non-draft prerelease of the preview channel, or the latest
// release. No release (404) is (nil, nil).
func (u *Updater) lookup(ctx context.Context, repo, channel, tag string) (*release, error) {
	base := strings.TrimRight(u.o.APIURL, "/") + "/repos/" + repo + "/releases"
	switch {
	case tag != "":
		var r release
		found, err := u.getJSON(ctx, base+"/tags/"+url.PathEscape(tag), &r)
		if !found || err != nil {
			return nil, err
		}
		return &r, nil
	case channel == "preview":
		var list []release
		found, err := u.getJSON(ctx, base+"?per_page=20", &list)
		if !found || err != nil {
			return nil, err
		}
		for i := range list {
			if !list[i].Draft && list[i].Prerelease {
				return &list[i], nil
			}
		}
		return nil, nil
	default:
		var r release
		found, err := u.getJSON(ctx, base+"/latest", &r)
		if !found || err != nil {
			return nil, err
		}
		return &r, nil
	}
}

// getJSON GETs an API URL into v; a 404 is found == false.
func (u *Updater) getJSON(ctx context.Context, rawURL string, v any) (found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return false, fmt.Errorf("release lookup: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("User-Agent", "openflare/"+u.o.Version)
	resp, err := u.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("release lookup: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("release lookup: GET %s: %s", rawURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReleaseJSON+1))
	if err != nil {
		return false, fmt.Errorf("release lookup: GET %s: %w", rawURL, err)
	}
	if len(body) > maxReleaseJSON {
		return false, fmt.Errorf("release lookup: GET %s: reply larger than %d bytes", rawURL, maxReleaseJSON)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, fmt.Errorf("release lookup: GET %s: %w", rawURL, err)
	}
	return true, nil
}

// AssetNames are the release asset names that fit a build, best first:
// openflare-agent-<GOOS>-<GOARCH> (PROTOCOL 10). For 32-bit ARM the
// release also names the GOARM level as cross/targets builds it
// ("openflare-agent-linux-armv7"), because an armv7 binary does not run on
// an armv6 board; the bare "-arm" name a release may carry instead comes
// second. goarm is the build's GOARM setting ("7", or "7,softfloat").
func AssetNames(goos, goarch, goarm string) []string {
	name := "openflare-agent-" + goos + "-" + goarch
	ext := ""
	if goos == "windows" {
		ext = ".exe"
	}
	if level, _, _ := strings.Cut(goarm, ","); goarch == "arm" && level != "" {
		return []string{name + "v" + level + ext, name + ext}
	}
	return []string{name + ext}
}

// pick returns the first asset of rel named in names.
func pick(rel *release, names []string) (asset, bool) {
	for _, n := range names {
		for _, a := range rel.Assets {
			if a.Name == n {
				return a, true
			}
		}
	}
	return asset{}, false
}

func find(rel *release, name string) (asset, bool) { return pick(rel, []string{name}) }

var (
	errNoDigest     = errors.New("no SHA-256 digest available")
	errBadDigest    = errors.New("malformed SHA-256 digest")
	errBadSignature = errors.New("malformed signature")
)

// ParseDigestField reads a GitHub asset's digest field. ok is false when
// the field names no SHA-256 ("" or another algorithm); a "sha256:" value
// that is not 64 hex digits is an error.
func ParseDigestField(field string) (sum []byte, ok bool, err error) {
	algo, value, found := strings.Cut(strings.TrimSpace(field), ":")
	if !found || !strings.EqualFold(algo, "sha256") {
		return nil, false, nil
	}
	sum, err = parseHexSum(value)
	return sum, err == nil, err
}

// ParseDigestFile reads a <name>.sha256 asset in the forms PROTOCOL 10
// accepts: "<hex>", "<hex>  <name>", "<hex> *<name>" (sha256sum's text and
// binary modes) and "SHA256(<name>)= <hex>" (openssl's). A file listing
// several files (a SHA256SUMS) is read for the line naming name; a line
// naming another file never counts.
func ParseDigestFile(data []byte, name string) ([]byte, error) {
	var bare [][]byte
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "SHA256("); ok {
			file, hexSum, ok := strings.Cut(rest, ")=")
			if !ok {
				return nil, fmt.Errorf("%w: %q", errBadDigest, line)
			}
			if file == name {
				return parseHexSum(hexSum)
			}
			continue
		}
		hexSum, file, hasName := strings.Cut(line, " ")
		if !hasName {
			sum, err := parseHexSum(hexSum)
			if err != nil {
				return nil, err
			}
			bare = append(bare, sum)
			continue
		}
		file = strings.TrimPrefix(strings.TrimLeft(file, " "), "*")
		if file == name {
			return parseHexSum(hexSum)
		}
	}
	if len(bare) == 1 {
		return bare[0], nil
	}
	return nil, fmt.Errorf("%w: no line for %s", errBadDigest, name)
}

func parseHexSum(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	sum, err := hex.DecodeString(s)
	if err != nil || len(sum) != 32 {
		return nil, fmt.Errorf("%w: %q is not 64 hex digits", errBadDigest, truncate(s, 80))
	}
	return sum, nil
}

// ParseSignature reads a <name>.sig asset: the 64-byte Ed25519 signature
// raw, or in standard base64 (surrounding whitespace ignored).
func ParseSignature(data []byte) ([]byte, error) {
	if len(data) == 64 {
		return data, nil
	}
	sig, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil || len(sig) != 64 {
		return nil, fmt.Errorf("%w: want 64 raw bytes or their base64, got %d bytes", errBadSignature, len(data))
	}
	return sig, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
