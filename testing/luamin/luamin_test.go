package luamin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStrip(t *testing.T) {
	for in, want := range map[string]string{
		"local a = 1 -- one\n":                  "local a = 1\n",
		"    -- a comment line\nreturn a\n":     "\nreturn a\n",
		"--[[ long\ncomment ]] x = 1\n":         "\nx = 1\n",
		"--[==[ a ]] still\n]==]y\n":            "\ny\n",
		"s = \"-- not a comment\" -- is\n":      "s = \"-- not a comment\"\n",
		"s = 'it\\'s -- kept'\n":                "s = 'it\\'s -- kept'\n",
		"s = [[\n    -- kept\n  x ]] -- gone\n": "s = [[\n    -- kept\n  x ]]\n",
		"t[i] = t[ [[k]] ]\n":                   "t[i] = t[ [[k]] ]\n",
		"\tif x then   \n\t\treturn  \n\tend\n": "if x then\nreturn\nend\n",
		"a = 1 --[[ inline ]] + 2\n":            "a = 1  + 2\n",
		"no newline -- at the end":              "no newline",
		"s = [==[ ]] ]==] -- after\n":           "s = [==[ ]] ]==]\n",
		"x = \"unterminated\nnext -- c\n":       "x = \"unterminated\nnext\n",
	} {
		if got := Strip(in); got != want {
			t.Errorf("Strip(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every script of the agent keeps its line count, so a logged error names
// the source's line, and loses every comment line.
func TestAgentScriptsKeepLines(t *testing.T) {
	n := 0
	err := filepath.WalkDir("../../agent/luaassets/lua", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".lua") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		src, got := string(b), Strip(string(b))
		if strings.Count(got, "\n") != strings.Count(src, "\n") {
			t.Errorf("%s: %d lines, %d once stripped", p, strings.Count(src, "\n"), strings.Count(got, "\n"))
		}
		for i, l := range strings.Split(got, "\n") {
			if strings.HasPrefix(l, "--") {
				t.Errorf("%s:%d: a comment survived: %q", p, i+1, l)
			}
		}
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("walked %d scripts: %v", n, err)
	}
}
