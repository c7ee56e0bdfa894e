// Package cliflag parses the agent's few command-line flags, the way the
// standard library's flag package does for them: -name value, -name=value,
// --name, a boolean alone or as -name=false, parsing stopping at the first
// argument that is not a flag or after "--". The flag package's generality
// (every value type, flag.Value, the global set) cost the arm64 binary
// about 10 KiB of flash for four flags.
package cliflag

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrHelp is returned by Parse for -h or -help, after the usage is printed.
var ErrHelp = errors.New("help requested")

type value struct {
	name, help string
	str        *string
	boolean    *bool
	given      bool
}

// Set is one command's flags.
type Set struct {
	name   string
	out    io.Writer
	values []*value
	args   []string
	// Usage prints the command's usage to its output; by default a list of
	// its flags.
	Usage func()
}

// New returns an empty set for the command name, reporting errors to out.
func New(name string, out io.Writer) *Set {
	s := &Set{name: name, out: out}
	s.Usage = s.defaults
	return s
}

// String defines a string flag.
func (s *Set) String(name, def, help string) *string {
	p := new(string)
	s.StringVar(p, name, def, help)
	return p
}

// StringVar defines a string flag stored in p.
func (s *Set) StringVar(p *string, name, def, help string) {
	*p = def
	s.values = append(s.values, &value{name: name, help: help, str: p})
}

// Bool defines a boolean flag, false unless given.
func (s *Set) Bool(name, help string) *bool {
	p := new(bool)
	s.values = append(s.values, &value{name: name, help: help, boolean: p})
	return p
}

// Given reports whether the flag name was on the command line.
func (s *Set) Given(name string) bool {
	v := s.lookup(name)
	return v != nil && v.given
}

// Args are the arguments after the flags.
func (s *Set) Args() []string { return s.args }

func (s *Set) lookup(name string) *value {
	for _, v := range s.values {
		if v.name == name {
			return v
		}
	}
	return nil
}

// Parse reads the flags at the start of args.
func (s *Set) Parse(args []string) error {
	for len(args) > 0 {
		a := args[0]
		if len(a) < 2 || a[0] != '-' {
			break
		}
		args = args[1:]
		if a == "--" {
			break
		}
		name := strings.TrimPrefix(a[1:], "-")
		name, val, hasVal := strings.Cut(name, "=")
		v := s.lookup(name)
		switch {
		case name == "" || name[0] == '-' || name[0] == '=':
			return s.fail("bad flag syntax: %s", a)
		case v == nil && (name == "h" || name == "help"):
			s.Usage()
			return ErrHelp
		case v == nil:
			return s.fail("flag provided but not defined: -%s", name)
		case v.boolean != nil:
			b := true
			if hasVal {
				var err error
				if b, err = strconv.ParseBool(val); err != nil {
					return s.fail("invalid boolean value %q for -%s", val, name)
				}
			}
			*v.boolean = b
		default:
			if !hasVal {
				if len(args) == 0 {
					return s.fail("flag needs an argument: -%s", name)
				}
				val, args = args[0], args[1:]
			}
			*v.str = val
		}
		v.given = true
	}
	s.args = args
	return nil
}

func (s *Set) fail(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	fmt.Fprintln(s.out, err)
	s.Usage()
	return err
}

func (s *Set) defaults() {
	fmt.Fprintf(s.out, "Usage of %s:\n", s.name)
	for _, v := range s.values {
		kind := " string"
		if v.boolean != nil {
			kind = ""
		}
		fmt.Fprintf(s.out, "  -%s%s\n    \t%s\n", v.name, kind, v.help)
	}
}
