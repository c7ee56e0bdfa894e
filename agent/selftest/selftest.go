// Package selftest is the one home of the agent's self-test: the server
// block agent/landing adds to every main config it lands, and what
// agent/nginx reads back from a landed config to send the request after
// each reload, start and restart.
//
// The block listens on a Unix socket in a directory only the agent's own
// user can enter (the master, which creates the socket, runs as that user
// or root; its workers accept on the socket they inherit and never need
// the path), named for the generation, a hash of everything the apply
// lands: only workers of the new configuration listen on it, so the first
// answer is a new worker's, and no client, no other local user and no
// process of the workers' user can reach it, squat its address or read
// the generation.
package selftest

import (
	"fmt"
	"path/filepath"
	"strings"
)

const (
	// ServerName names the self-test server block.
	ServerName = "openflare-agent-probe"
	// Marker is in every main config that carries the block.
	Marker = "server_name " + ServerName + ";"
	// Path is the location the request asks for.
	Path = "/openflare/agent-probe"
	// PublishPath is the location that publishes the IP-group and geo
	// snapshots on disk to every worker at once (waf.runtime's
	// publish_snapshots, DATAPLANE 3), asked after one landed: configs
	// with Lua only.
	PublishPath = "/openflare/publish-snapshots"
	// DirMode is the socket directory's: the agent's user alone.
	DirMode = 0o700

	// slot holds the generation's place until the apply's set of files is
	// complete (Stamp).
	slot = "pending-generation"
	// variable holds the block's generation for its handler to answer with.
	variable = "$openflare_generation"
	// generationPrefix starts the block's line that names its generation.
	generationPrefix = "set " + variable + ` "`
	// answerPrefix starts a healthy worker's answer (Answer, the handler
	// without Lua, and probe.lua's).
	answerPrefix = "ok "
	// socketLen is how much of the generation names its socket: short
	// enough for the 108-byte limit of a socket path below a deep
	// data_dir, long enough that two generations in a row never share it.
	socketLen = 8
	// logName is the block's own error log in the socket directory: what
	// the self-test's requests log, which no client request can write.
	logName = "error.log"
)

// Block is the server block for a main config, listening in dir. script
// is the Lua file that answers (probe.lua, which loads every script and
// uses the files, runtime and temp directories the sites use), or "" for
// a config without Lua (the safe fallback): that only proves a worker
// answers.
func Block(dir, script string) string {
	handler := `return 200 "` + answerPrefix + variable + `\n";`
	var publish string
	if script != "" {
		handler = "content_by_lua_file " + script + ";"
		publish = `
        location = ` + PublishPath + ` {
            content_by_lua_block { require("waf.runtime").publish_snapshots() }
        }`
	}
	return fmt.Sprintf(`    # openflare-agent self-test: a socket only the agent can reach, asked after each reload.
    server {
        listen unix:%s;
        %s
        access_log off;
        error_log %s warn;
        %s%s";
        location = %s {
            %s
        }%s
        location / {
            return 404;
        }
    }
`, filepath.Join(dir, slot), Marker, LogPath(dir), generationPrefix, slot, Path, handler, publish)
}

// LogPath is the self-test block's error log in dir.
func LogPath(dir string) string { return filepath.Join(dir, logName) }

// Stamp writes gen (hex) into text's block: its socket and the generation
// its workers answer with. Text without a block is returned unchanged.
func Stamp(text, gen string) string {
	if !strings.Contains(text, generationPrefix+slot) {
		return text
	}
	text = strings.ReplaceAll(text, generationPrefix+slot, generationPrefix+gen)
	return strings.ReplaceAll(text, "/"+slot+";", "/"+gen[:min(socketLen, len(gen))]+";")
}

// Target is what a landed main config's self-test answers on.
type Target struct {
	Socket     string
	Generation string
}

// Find reads the self-test's socket and generation out of a landed main
// config. ok is false for a config without a stamped block (the safe
// fallback of an older release, a template whose http block the agent did
// not find): there is nothing to ask.
func Find(mainText string) (Target, bool) {
	head, _, ok := strings.Cut(mainText, Marker)
	if !ok {
		return Target{}, false
	}
	i := strings.LastIndex(head, "listen unix:")
	if i < 0 {
		return Target{}, false
	}
	socket, _, ok := strings.Cut(head[i+len("listen unix:"):], ";")
	if !ok || strings.ContainsAny(socket, " \t\n") || strings.HasSuffix(socket, "/"+slot) {
		return Target{}, false
	}
	_, rest, ok := strings.Cut(mainText, generationPrefix)
	if !ok {
		return Target{}, false
	}
	gen, _, ok := strings.Cut(rest, `"`)
	if !ok || gen == slot {
		return Target{}, false
	}
	return Target{Socket: socket, Generation: gen}, true
}

// Answer is what a healthy worker of generation gen replies.
func Answer(gen string) string { return answerPrefix + gen }
