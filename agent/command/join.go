package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"openflare/agent/config"
	"openflare/internal/atomicfile"
	"openflare/internal/cliflag"
)

// JoinConfigPath is the agent.json join writes unless -config names
// another: the one the packaged systemd unit, install.sh's unit and the
// OpenWrt init script run the agent with.
const JoinConfigPath = "/etc/openflare/agent.json"

// restartService restarts the installed service after join wrote
// JoinConfigPath; tests replace it.
var restartService = restartInstalledService

// Join is the first-run command of a packaged node: it writes server_url
// and discovery_token into agent.json, keeping every other key the package
// wrote (data_dir, openresty_path, nginx_user), then restarts the service
// so the agent registers. The token comes from the command line or, kept
// out of the process list, from OPENFLARE_DISCOVERY_TOKEN; it is never
// printed. The file is replaced atomically (0600) and only once the agent
// would load it; a node that has registered (agent_token set) is refused,
// since a discovery token would make it a second node.
func Join(configPath string, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := cliflag.New("join", stderr)
	fs.StringVar(&configPath, "config", configPath, "path of agent.json")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: openflare-agent join [-config agent.json] <server_url> [<discovery_token>]\n"+
			"  the token may come from OPENFLARE_DISCOVERY_TOKEN instead (kept out of the process list)")
	}
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	rest := fs.Args()
	if len(rest) < 1 || len(rest) > 2 {
		fs.Usage()
		return ExitUsage
	}
	serverURL, token := rest[0], getenv("OPENFLARE_DISCOVERY_TOKEN")
	if len(rest) == 2 {
		token = rest[1]
	}
	if token == "" {
		fmt.Fprintln(stderr, "error: no discovery token: give it after the server URL or in OPENFLARE_DISCOVERY_TOKEN")
		return ExitUsage
	}
	if err := writeJoined(configPath, serverURL, token); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s: server_url %s, discovery_token ****\n", configPath, serverURL)
	if configPath != JoinConfigPath {
		fmt.Fprintf(stdout, "start the agent: openflare-agent -config %s\n", configPath)
		return 0
	}
	if err := restartService(stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// member is one top-level key of agent.json with its raw value, in file
// order.
type member struct {
	key string
	raw json.RawMessage
}

// writeJoined replaces path with its members plus server_url and
// discovery_token, after checking that the agent loads the result.
func writeJoined(path, serverURL, token string) error {
	members, err := readMembers(path)
	if err != nil {
		return err
	}
	for _, m := range members {
		var s string
		if m.key == "agent_token" && json.Unmarshal(m.raw, &s) == nil && s != "" {
			return fmt.Errorf("%s: this node has registered already (agent_token is set); remove agent_token to join it as a new node", path)
		}
	}
	members = set(members, "server_url", serverURL)
	members = set(members, "discovery_token", token)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, m := range members {
		var v bytes.Buffer
		if err := json.Indent(&v, m.raw, "  ", "  "); err != nil {
			return fmt.Errorf("%s: key %q: %v", path, m.key, err)
		}
		k, _ := json.Marshal(m.key)
		fmt.Fprintf(&b, "  %s: %s", k, v.Bytes())
		if i < len(members)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := atomicfile.Create(path, 0o600)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Temp().Write(b.Bytes()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// What the service will read: the file alone, none of this shell's
	// OPENFLARE_* variables. Load's errors never quote a token.
	if _, _, err := config.Load(f.Temp().Name(), func(string) string { return "" }); err != nil {
		return fmt.Errorf("%s left unchanged: %w", path, err)
	}
	return f.Commit()
}

// readMembers reads agent.json's top-level members in order; a missing
// file has none.
func readMembers(path string) ([]member, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%s is not a JSON object", path)
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %v", path, err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s: invalid JSON: %v", path, err)
		}
		members = append(members, member{key: tok.(string), raw: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %v", path, err)
	}
	return members, nil
}

// set replaces every member named key with the string value, or appends it.
func set(members []member, key, value string) []member {
	raw, _ := json.Marshal(value)
	found := false
	for i := range members {
		if members[i].key == key {
			members[i].raw, found = raw, true
		}
	}
	if !found {
		members = append(members, member{key: key, raw: raw})
	}
	return members
}

// restartInstalledService restarts the agent's service under systemd or
// procd, whichever runs it here; without either it says how to start it.
// A unit that gave up before the node joined (five failed starts a
// minute) is reset first, or systemd would refuse the start.
func restartInstalledService(stdout, stderr io.Writer) error {
	var cmds [][]string
	switch {
	case isDir("/run/systemd/system"):
		cmds = [][]string{
			{"systemctl", "reset-failed", "openflare-agent.service"},
			{"systemctl", "restart", "openflare-agent.service"},
		}
	case isFile("/etc/init.d/openflare-agent") && isFile("/etc/openwrt_release"):
		cmds = [][]string{{"/etc/init.d/openflare-agent", "restart"}}
	default:
		fmt.Fprintf(stdout, "no systemd or procd here: start the agent with openflare-agent -config %s\n", JoinConfigPath)
		return nil
	}
	for i, argv := range cmds {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil && i == len(cmds)-1 {
			return fmt.Errorf("agent.json is written, but %q failed: %v", argv, err)
		}
	}
	fmt.Fprintln(stdout, "restarted the openflare-agent service")
	return nil
}

func isDir(p string) bool  { fi, err := os.Stat(p); return err == nil && fi.IsDir() }
func isFile(p string) bool { fi, err := os.Stat(p); return err == nil && fi.Mode().IsRegular() }
