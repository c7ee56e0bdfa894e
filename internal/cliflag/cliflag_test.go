package cliflag

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The forms the agent's commands and its unit accept parse as the flag
// package parses them; what it would refuse is refused with its message.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		config  string
		version bool
		rest    []string
		err     string
	}{
		{args: nil, config: "./agent.json"},
		{args: []string{"-config", "/etc/a.json"}, config: "/etc/a.json"},
		{args: []string{"--config=/etc/b.json", "status"}, config: "/etc/b.json", rest: []string{"status"}},
		{args: []string{"-version"}, config: "./agent.json", version: true},
		{args: []string{"-version=false", "check", "-config", "x"}, config: "./agent.json", rest: []string{"check", "-config", "x"}},
		{args: []string{"--", "-config"}, config: "./agent.json", rest: []string{"-config"}},
		{args: []string{"-", "x"}, config: "./agent.json", rest: []string{"-", "x"}},
		{args: []string{"-config"}, err: "flag needs an argument: -config"},
		{args: []string{"-nope"}, err: "flag provided but not defined: -nope"},
		{args: []string{"-version=maybe"}, err: `invalid boolean value "maybe" for -version`},
		{args: []string{"---config=x"}, err: "bad flag syntax: ---config=x"},
		{args: []string{"-=x"}, err: "bad flag syntax: -=x"},
	} {
		var out strings.Builder
		s := New("agent", &out)
		config := s.String("config", "./agent.json", "path of agent.json")
		version := s.Bool("version", "print the version")
		err := s.Parse(tc.args)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || !strings.Contains(out.String(), tc.err+"\nUsage of agent:\n  -config string\n") {
				t.Errorf("%q: err %v, output %q", tc.args, err, out.String())
			}
			continue
		}
		if err != nil || *config != tc.config || *version != tc.version || !slices.Equal(s.Args(), tc.rest) {
			t.Errorf("%q: config %q version %v rest %q err %v", tc.args, *config, *version, s.Args(), err)
		}
		if s.Given("config") != (tc.config != "./agent.json") {
			t.Errorf("%q: Given(config) = %v", tc.args, s.Given("config"))
		}
	}
}

// -h and -help print the usage and say so, unless a flag has that name.
func TestHelp(t *testing.T) {
	for _, a := range []string{"-h", "--help"} {
		var out strings.Builder
		s := New("agent", &out)
		s.Usage = func() { out.WriteString("usage: agent [flags]\n") }
		if err := s.Parse([]string{a}); !errors.Is(err, ErrHelp) || out.String() != "usage: agent [flags]\n" {
			t.Errorf("%s: %v, %q", a, err, out.String())
		}
	}
	s := New("agent", &strings.Builder{})
	h := s.Bool("h", "human")
	if err := s.Parse([]string{"-h"}); err != nil || !*h {
		t.Fatalf("-h defined: %v %v", err, *h)
	}
}
