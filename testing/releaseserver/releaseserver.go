// Package releaseserver is a small GitHub-release-shaped server for tests
// of the agent's self-update: the three release lookups PROTOCOL 10 makes
// (/repos/<owner>/<repo>/releases/latest, /releases/tags/<tag>,
// /releases?per_page=20) and the asset downloads their
// browser_download_url fields point at, on 127.0.0.1, with faults a real
// release could show: a digest of other bytes, a body cut short, no digest
// at all, a signature of other bytes, a download that stalls.
package releaseserver

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Fault is what is wrong with a release.
type Fault int

const (
	// NoFault: the asset, its digest and (with a key) its signature agree.
	NoFault Fault = iota
	// WrongDigest states the SHA-256 of other bytes.
	WrongDigest
	// Truncated announces the whole asset in Content-Length and sends half.
	Truncated
	// NoDigest has neither a digest field nor a .sha256 asset.
	NoDigest
	// BadSignature signs other bytes.
	BadSignature
	// Stalled sends half the asset and then nothing, until the client
	// gives up or the server closes.
	Stalled
)

func (f Fault) String() string {
	return [...]string{"none", "wrong digest", "truncated", "no digest", "bad signature", "stalled"}[f]
}

// Release is one release with the agent binary as its asset.
type Release struct {
	Tag        string
	Prerelease bool
	Draft      bool
	Binary     []byte
	// AssetName defaults to DefaultAssetName().
	AssetName string
	// DigestFile states the SHA-256 in a <asset>.sha256 asset, as
	// sha256sum prints it, instead of the asset's digest field.
	DigestFile bool
	// Key, when set, adds <asset>.sig: the base64 Ed25519 signature of
	// the binary.
	Key   ed25519.PrivateKey
	Fault Fault
}

// DefaultAssetName is the asset name for the platform the tests run on.
func DefaultAssetName() string { return "openflare-agent-" + runtime.GOOS + "-" + runtime.GOARCH }

// Server serves the releases of one repository.
type Server struct {
	repo string
	srv  *httptest.Server
	done chan struct{} // closed by Close: stalled downloads end

	mu        sync.Mutex
	releases  []Release // newest first
	lookups   int
	downloads map[string]int
	onAsset   func(name string)
}

// Start serves repo ("owner/name") on 127.0.0.1.
func Start(repo string) *Server {
	s := &Server{repo: repo, downloads: map[string]int{}, done: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the API base, for agent.json's update_api_url.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() {
	close(s.done)
	s.srv.Close()
}

// Set replaces the releases, newest first. "latest" is the first that is
// neither a draft nor a prerelease, as on GitHub.
func (s *Server) Set(releases ...Release) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = releases
}

// OnAsset sets a function called as a binary download starts.
func (s *Server) OnAsset(f func(name string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onAsset = f
}

// Lookups counts release API requests.
func (s *Server) Lookups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups
}

// Downloads counts the downloads of the asset named name.
func (s *Server) Downloads(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads[name]
}

type assetJSON struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	URL    string `json:"browser_download_url"`
	Digest string `json:"digest,omitempty"`
}

type releaseJSON struct {
	TagName    string      `json:"tag_name"`
	Name       string      `json:"name"`
	Draft      bool        `json:"draft"`
	Prerelease bool        `json:"prerelease"`
	Assets     []assetJSON `json:"assets"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	prefix := "/repos/" + s.repo + "/releases"
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/download/"):
		s.serveAsset(w, r, strings.TrimPrefix(p, "/download/"))
	case !strings.EqualFold(p, prefix) && !strings.HasPrefix(strings.ToLower(p), strings.ToLower(prefix)+"/"):
		http.NotFound(w, r)
	default:
		s.mu.Lock()
		s.lookups++
		s.mu.Unlock()
		s.serveAPI(w, r, p[len(prefix):])
	}
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out any
	switch {
	case rest == "" || rest == "/":
		n, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
		if n <= 0 {
			n = 30
		}
		list := []releaseJSON{}
		for i := range s.releases[:min(n, len(s.releases))] {
			list = append(list, s.releaseJSON(i))
		}
		out = list
	case rest == "/latest":
		for i, rel := range s.releases {
			if !rel.Draft && !rel.Prerelease {
				out = s.releaseJSON(i)
				break
			}
		}
	case strings.HasPrefix(rest, "/tags/"):
		tag := strings.TrimPrefix(rest, "/tags/")
		for i, rel := range s.releases {
			if rel.Tag == tag && !rel.Draft {
				out = s.releaseJSON(i)
				break
			}
		}
	}
	if out == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"message":"Not Found"}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// releaseJSON describes release i; its asset URLs are /download/<i>/<name>.
func (s *Server) releaseJSON(i int) releaseJSON {
	rel := s.releases[i]
	name := assetName(rel)
	url := func(n string) string { return fmt.Sprintf("%s/download/%d/%s", s.srv.URL, i, n) }
	bin := assetJSON{Name: name, Size: int64(len(rel.Binary)), URL: url(name)}
	out := releaseJSON{TagName: rel.Tag, Name: rel.Tag, Draft: rel.Draft, Prerelease: rel.Prerelease}
	if rel.Fault != NoDigest && !rel.DigestFile {
		bin.Digest = "sha256:" + hex.EncodeToString(stated(rel))
	}
	out.Assets = append(out.Assets, bin)
	if rel.Fault != NoDigest && rel.DigestFile {
		out.Assets = append(out.Assets, assetJSON{Name: name + ".sha256", Size: int64(len(digestFile(rel))), URL: url(name + ".sha256")})
	}
	if rel.Key != nil {
		out.Assets = append(out.Assets, assetJSON{Name: name + ".sig", Size: int64(len(signature(rel))), URL: url(name + ".sig")})
	}
	return out
}

func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request, rest string) {
	idx, name, _ := strings.Cut(rest, "/")
	i, err := strconv.Atoi(idx)
	s.mu.Lock()
	if err != nil || i < 0 || i >= len(s.releases) {
		s.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	rel := s.releases[i]
	s.downloads[name]++
	hook := s.onAsset
	s.mu.Unlock()
	var body []byte
	switch base := assetName(rel); name {
	case base:
		if hook != nil {
			hook(name)
		}
		body = rel.Binary
	case base + ".sha256":
		body = digestFile(rel)
	case base + ".sig":
		body = signature(rel)
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if name == assetName(rel) {
		switch rel.Fault {
		case Truncated:
			// The handler returns with bytes still owed: the server
			// closes the connection and the client sees an unexpected EOF.
			w.Write(body[:len(body)/2])
			return
		case Stalled:
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-s.done:
			}
			return
		}
	}
	w.Write(body)
}

func assetName(rel Release) string {
	if rel.AssetName != "" {
		return rel.AssetName
	}
	return DefaultAssetName()
}

// stated is the SHA-256 the release states for its binary.
func stated(rel Release) []byte {
	b := rel.Binary
	if rel.Fault == WrongDigest {
		b = append([]byte("not the binary "), b...)
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

func digestFile(rel Release) []byte {
	return []byte(hex.EncodeToString(stated(rel)) + "  " + assetName(rel) + "\n")
}

func signature(rel Release) []byte {
	msg := rel.Binary
	if rel.Fault == BadSignature {
		msg = append([]byte("not the binary "), msg...)
	}
	return []byte(base64.StdEncoding.EncodeToString(ed25519.Sign(rel.Key, msg)) + "\n")
}
