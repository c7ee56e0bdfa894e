package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The policy's reader against the real nginx: for any text, what nginx
// reports when it reads it (the first directive it refuses and on which
// line, a syntax error and its line, or that it read everything) is what
// the policy's reader predicts. The texts use only `env` (a main-context
// directive that takes one word of anything and does nothing at -t), names
// nginx does not know, and a final `include` whose open() error quotes the
// word exactly as nginx resolved it, so names, lines, block structure and
// word values are all compared. Seeds are the tricks the template policy
// must see through; testdata/fuzz holds what fuzzing added. `make test`
// fuzzes it for a bounded time.
func FuzzLexerMatchesNginx(f *testing.F) {
	for _, s := range lexerSeeds {
		f.Add(s)
	}
	bin := nginxBinary(f)
	f.Fuzz(func(t *testing.T, text string) {
		if strings.ContainsRune(text, 0) || len(text) > 16<<10 || strings.Contains(text, "load_module") {
			// nginx prints names up to a NUL; load_module would load a file.
			t.Skip()
		}
		want, ok := predict(text)
		if !ok {
			t.Skip()
		}
		got := nginxVerdict(t, bin, text)
		if !want.matches(got) {
			t.Fatalf("text %q:\npolicy reader predicts %+v\nnginx says %+v", text, want, got)
		}
	})
}

// lexerSeeds are the cases the lexer must get right: every escape, both
// quotes, '${', '}' and '#' inside words, comments, CR/LF variants, and
// the issue 20 B1 bypass.
var lexerSeeds = []string{
	"env a;\nenv b;\n",
	"env a;zzq b;\n",
	"env a\\${;\nzzq;\n",               // B1: \$ does not make '{' part of the word
	"env ${a};\nzzq;\n",                // ${...} is one word
	"env a${b}c;\nzzq;\n",              // ... inside a word too
	"env $${;\nzzq;\n",                 // '$$' then '{'
	"env a#b;\nzzq;\n",                 // '#' inside a word is no comment
	"env a; #zzq;\nzzr;\n",             // a comment to the end of the line
	"env a; #zzq;\rzzr;\n",             // CR does not end a comment
	"env a;\r\nzzq;\r\n",               // CR LF
	"env\r\na;\nzzq;\n",                // CR LF between words
	"env 'a b';\nzzq;\n",               // single quotes
	"env \"a b\";\nzzq;\n",             // double quotes
	"env 'a\\'b';\nzzq;\n",             // escaped quote
	"env \"a\\\"b\";\nzzq;\n",          // escaped double quote
	"env 'a\"b';\nzzq;\n",              // the other quote inside
	"env a'b;\nzzq;\n",                 // a quote inside a word is a character
	"env 'a'b;\n",                      // a word right after a closing quote
	"env 'a')\nzzq;\n",                 // ')' may follow a closing quote
	"env 'a';zzq;\n",                   // ';' right after a closing quote
	"env a\\ b;\nzzq;\n",               // an escaped space joins words
	"env a\\;b;\nzzq;\n",               // an escaped ';'
	"env a\\\nb;\nzzq;\n",              // an escaped LF
	"env a\\}b;\nzzq;\n",               // an escaped '}'
	"env a}b;\nzzq;\n",                 // '}' inside a word
	"env a{b;\nzzq;\n",                 // '{' ends a word and opens a block
	"}\n",                              // a block that was never opened
	"zzq {\n",                          // a block never closed
	"env a",                            // the end of the text mid-directive
	"env 'a\n",                         // an unterminated quote
	"env a;\n\n\nzzq\n;\n",             // the line nginx reports is the terminator's
	"zzq\\t;\n",                        // \t in a name
	"env a;\ninclude 'x\\ty\\\\z';\n",  // escapes resolved in a word nginx quotes back
	"env a;\ninclude \"x\\qy\\$z\";\n", // unknown escapes stay
	"env a;\ninclude x\\\"y;\n",
	"env a;\ninclude 'a b'c;\n",
	"env a;\ninclude x${y};\n",
	"env a;\ninclude \"x\n y\";\n",
	"# zzq\nenv a;\ninclude x;\n",
	"env " + strings.Repeat("a", 4095) + ";\nzzq;\n",     // the longest word nginx takes
	"env " + strings.Repeat("a", 4096) + ";\nzzq;\n",     // one byte too long
	"#" + strings.Repeat("c", 4096) + "\nenv a;\nzzq;\n", // comments count too
}

// verdict is what nginx says of a text: kind "ok" (read it all: nginx
// then misses its events block), "error" (a message and its line).
type verdict struct {
	kind string
	line int
	msg  string
	// name is the directive the message must quote; value a word it must
	// contain (a predicted include's path).
	name, value string
	// anyMsg: only the line is predicted (a syntax error).
	anyMsg bool
}

func (want verdict) matches(got verdict) bool {
	if want.kind == "unknown?" {
		if got.kind != "error" || !strings.HasPrefix(got.msg, "unknown directive") {
			return true // a directive of nginx's own
		}
		want.kind = "error"
	}
	if want.kind != got.kind {
		return false
	}
	if want.kind == "ok" {
		return true
	}
	if want.line != got.line {
		return false
	}
	switch {
	case want.anyMsg:
		return !strings.HasPrefix(got.msg, "unknown directive") && !strings.HasPrefix(got.msg, "invalid number")
	case want.value != "":
		return strings.Contains(got.msg, want.value)
	}
	if strings.Contains(got.msg, `"`+want.name+`"`) {
		return true
	}
	// nginx cuts a message at its error-string limit: a long name is
	// quoted only in part, up to the end of the message.
	i := strings.IndexByte(got.msg, '"')
	return len(got.msg) >= 1000 && i >= 0 && strings.HasPrefix(`"`+want.name, got.msg[i:])
}

// predict is what nginx will say of text, by the policy's reader: the
// first directive nginx refuses, or the syntax error, in reading order.
// ok is false where nginx's answer depends on more than reading (a name
// that may be a real directive, an include of a pattern).
func predict(text string) (verdict, bool) {
	l := lexer{text: text, line: 1}
	for {
		words, term, err := l.next()
		if err != nil {
			line, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(err.Error(), ":", 2)[0], "line "))
			return verdict{kind: "error", line: line, anyMsg: true}, true
		}
		switch term {
		case 0:
			return verdict{kind: "ok"}, true
		case '}':
			return verdict{kind: "error", line: l.line, anyMsg: true}, true
		}
		name := words[0].val
		switch {
		case name == "env" && term == ';' && len(words) == 2:
			continue
		case name == "env":
			return verdict{kind: "error", line: l.line, name: name}, true
		case name == "include" && term == ';' && len(words) == 2:
			v := words[1].val
			// Only a path that cannot exist in the throw-away prefix:
			// nginx then quotes back the path it tried, joined to the
			// prefix.
			if v == "" || strings.ContainsAny(v, "*?[") || strings.HasPrefix(v, "/") ||
				slices.ContainsFunc(strings.Split(v, "/"), func(s string) bool { return s == "." || s == ".." || s == "t.conf" || s == "e.log" }) {
				return verdict{}, false
			}
			return verdict{kind: "error", line: l.line, value: "/" + v + `" failed`}, true
		case name == "include":
			return verdict{kind: "error", line: l.line, name: name}, true
		case realName.MatchString(name) && !strings.HasPrefix(name, "zz"):
			// It may be one of nginx's own: only a name nginx calls
			// unknown is compared.
			return verdict{kind: "unknown?", line: l.line, name: name}, true
		}
		return verdict{kind: "error", line: l.line, name: name}, true
	}
}

var realName = regexp.MustCompile(`^[a-z0-9_]+$`)

// nginxVerdict runs nginx -t on text in a throw-away prefix, as nobody
// when the test runs as root, so no word can make it write outside.
func nginxVerdict(t *testing.T, bin, text string) verdict {
	// t.TempDir's parent is closed to nobody.
	dir, err := os.MkdirTemp("", "policy-lexdiff-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	conf := filepath.Join(dir, "t.conf")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-t", "-q", "-p", dir+"/", "-e", filepath.Join(dir, "e.log"), "-c", conf)
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, _ := cmd.CombinedOutput()
	s := string(out)
	if strings.Contains(s, `no "events" section in configuration`) {
		return verdict{kind: "ok"}
	}
	m := regexp.MustCompile(`(?s)nginx: \[emerg\] (.*) in ` + regexp.QuoteMeta(conf) + `:(\d+)\n`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("nginx -t said nothing this test reads:\n%s", s)
	}
	line, _ := strconv.Atoi(m[2])
	return verdict{kind: "error", line: line, msg: m[1]}
}

func nginxBinary(t testing.TB) string {
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/openresty/nginx/sbin/nginx"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no nginx binary: the lexer is not held against nginx")
	}
	t.Skip("no nginx binary")
	return ""
}
