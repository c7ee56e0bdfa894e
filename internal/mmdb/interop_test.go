package mmdb

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"openflare/testing/hostexec"
)

// The interop test writes databases with MaxMind's own writer (Debian
// package libmaxmind-db-writer-perl) and compares every lookup of this
// package with mmdblookup (Debian package mmdb-bin), libmaxminddb's
// command-line client.

// perlWriter writes a database: perl writer.pl OUT IP_VERSION RECORD_SIZE ALIAS.
const perlWriter = `use strict; use warnings; use utf8;
use MaxMind::DB::Writer::Tree;
use Math::BigInt;
my ($out, $ipv, $rs, $alias) = @ARGV;
my %types = (
  country => 'map', registered_country => 'map', iso_code => 'utf8_string', names => 'map',
  en => 'utf8_string', de => 'utf8_string', ja => 'utf8_string', geoname_id => 'uint32',
  subdivisions => ['array', 'map'], location => 'map', latitude => 'double', longitude => 'double',
  accuracy_radius => 'uint16', f => 'float', big => 'uint64', huge => 'uint128', neg => 'int32',
  flag => 'boolean', off => 'boolean', raw => 'bytes', tags => ['array', 'utf8_string'], zero => 'uint32',
  small => 'uint64', mid => 'uint128', nums => ['array', 'uint16'],
);
my $tree = MaxMind::DB::Writer::Tree->new(
  ip_version => $ipv, record_size => $rs, database_type => 'Interop-City',
  languages => ['en', 'de'], description => { en => 'interop test' },
  map_key_type_callback => sub { $types{$_[0]} },
  alias_ipv6_to_ipv4 => $alias, remove_reserved_networks => 0,
);
sub city { my ($cc, $sub, $name) = @_;
  my $c = { geoname_id => 6252001, iso_code => $cc, names => { en => "Country $cc", de => "Land $cc", ja => "国 $cc" } };
  return { country => $c, registered_country => $c,
    subdivisions => [ { iso_code => $sub, names => { en => "Sub $sub" } }, { iso_code => 'ZZZ' } ],
    location => { latitude => 37.7749, longitude => -122.4194, accuracy_radius => 10 } };
}
$tree->insert_network('1.0.0.0/8', city('US', 'CA', 'SF'));
$tree->insert_network('1.2.3.0/24', city('DE', 'BY', 'Munich'));
$tree->insert_network('1.2.3.128/25', city('GB', 'ENG', 'London'));
$tree->insert_network('10.0.0.0/16', { country => { iso_code => 'FR' } });
$tree->insert_network('192.168.1.1/32', {
  f => 1.5, big => Math::BigInt->new('18446744073709551615'), huge => Math::BigInt->new('340282366920938463463374607431768211455'),
  mid => Math::BigInt->new('300'), small => 7, neg => -5, flag => 1, off => 0, raw => pack('C*', 0, 1, 255), zero => 0,
  tags => ['a', 'bé', 'x' x 300], nums => [1, 65535, 0], latitude => -0.5,
});
for my $i (0..40) { $tree->insert_network("100.$i.0.0/16", city(('JP','NL','SE')[$i % 3], "S$i", "C$i")); }
$tree->insert_network('203.0.113.7/32', { neg => 2147483647, tags => [] });
if ($ipv == 6) {
  $tree->insert_network('2001:db8::/32', city('JP', '13', 'Tokyo'));
  $tree->insert_network('2001:db8:1::/48', { country => { iso_code => 'NL' } });
  $tree->insert_network('2a00::/12', { neg => -2147483648, tags => [] });
  $tree->insert_network('ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127', { country => { iso_code => 'AQ' } });
}
open my $fh, '>:raw', $out or die;
$tree->write_tree($fh);
close $fh or die;
`

// interopTools skips t unless mmdblookup and MaxMind's Perl writer are
// installed.
func interopTools(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("mmdblookup"); err != nil {
		t.Skip("mmdblookup is not installed (Debian package mmdb-bin): skipping the comparison with libmaxminddb")
	}
	if out, err := hostexec.CombinedOutput(t, func() *exec.Cmd { return exec.Command("perl", "-MMaxMind::DB::Writer::Tree", "-e", "1") }); err != nil {
		t.Skipf("MaxMind's Perl writer is not installed (Debian package libmaxmind-db-writer-perl): %v: %s", err, bytes.TrimSpace(out))
	}
}

// mmdblookup runs mmdblookup and returns its answer parsed by parseMMDBLookup,
// with found false for "no entry" and for a path that is absent.
func mmdblookup(t *testing.T, file string, ip netip.Addr, path ...string) (v any, found bool) {
	t.Helper()
	// libmaxminddb looks an IPv4-mapped address up as IPv6, where it
	// has a record only if the database aliases ::ffff:0:0/96; this
	// package looks it up as the IPv4 address it is, so compare that.
	args := append([]string{"--file", file, "--ip", ip.Unmap().String(), "--"}, path...)
	var stdout, stderr bytes.Buffer
	err := hostexec.Run(t, func() *exec.Cmd {
		cmd := exec.Command("mmdblookup", args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		return cmd
	})
	switch out := stdout.String() + stderr.String(); {
	case strings.Contains(out, "Could not find an entry"),
		strings.Contains(out, "lookup path does not match the data"),
		strings.Contains(out, "IPv6 address in an IPv4-only database"):
		return nil, false
	case err != nil:
		t.Fatalf("mmdblookup %q: %v: %s", args, err, out)
	}
	lines := strings.Split(stdout.String(), "\n")
	var toks []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			toks = append(toks, l)
		}
	}
	v, rest, err := parseMMDBLookup(toks)
	if err != nil || len(rest) != 0 {
		t.Fatalf("mmdblookup %q: cannot parse (%v, %d lines left): %s", args, err, len(rest), stdout.String())
	}
	return v, true
}

// parseMMDBLookup parses mmdblookup's output, one token a line: "{", "}",
// "[", "]", `"key":` and `value <type>`. Scalars become comparable strings
// (see canonical).
func parseMMDBLookup(toks []string) (any, []string, error) {
	if len(toks) == 0 {
		return nil, nil, fmt.Errorf("unexpected end")
	}
	switch t := toks[0]; t {
	case "{":
		m := map[string]any{}
		toks = toks[1:]
		for len(toks) > 0 && toks[0] != "}" {
			k := toks[0]
			if !strings.HasPrefix(k, `"`) || !strings.HasSuffix(k, `":`) {
				return nil, nil, fmt.Errorf("bad key line %q", k)
			}
			v, rest, err := parseMMDBLookup(toks[1:])
			if err != nil {
				return nil, nil, err
			}
			m[k[1:len(k)-2]], toks = v, rest
		}
		if len(toks) == 0 {
			return nil, nil, fmt.Errorf("unterminated map")
		}
		return m, toks[1:], nil
	case "[":
		a := []any{}
		toks = toks[1:]
		for len(toks) > 0 && toks[0] != "]" {
			v, rest, err := parseMMDBLookup(toks)
			if err != nil {
				return nil, nil, err
			}
			a, toks = append(a, v), rest
		}
		if len(toks) == 0 {
			return nil, nil, fmt.Errorf("unterminated array")
		}
		return a, toks[1:], nil
	}
	i := strings.LastIndex(toks[0], " <")
	if i < 0 || !strings.HasSuffix(toks[0], ">") {
		return nil, nil, fmt.Errorf("bad value line %q", toks[0])
	}
	val, typ := toks[0][:i], toks[0][i+2:len(toks[0])-1]
	switch typ {
	case "utf8_string":
		return "s:" + strings.TrimSuffix(strings.TrimPrefix(val, `"`), `"`), toks[1:], nil
	case "uint16", "uint32", "uint64", "int32":
		return "n:" + val, toks[1:], nil
	case "uint128":
		n, ok := new(big.Int).SetString(strings.TrimPrefix(val, "0x"), 16)
		if !ok {
			return nil, nil, fmt.Errorf("bad uint128 %q", val)
		}
		return "n:" + n.String(), toks[1:], nil
	case "double", "float":
		return "f:" + val, toks[1:], nil
	case "boolean":
		return "b:" + val, toks[1:], nil
	case "bytes":
		return "x:" + val, toks[1:], nil
	}
	return nil, nil, fmt.Errorf("unknown type %q", typ)
}

// canonical converts a value decoded by this package into the form
// parseMMDBLookup gives mmdblookup's.
func canonical(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, x := range v {
			m[k] = canonical(x)
		}
		return m
	case []any:
		a := []any{}
		for _, x := range v {
			a = append(a, canonical(x))
		}
		return a
	case string:
		return "s:" + v
	case uint64:
		return "n:" + strconv.FormatUint(v, 10)
	case int64:
		return "n:" + strconv.FormatInt(v, 10)
	case *big.Int:
		return "n:" + v.String()
	case float64:
		return "f:" + strconv.FormatFloat(v, 'f', 6, 64)
	case bool:
		return "b:" + strconv.FormatBool(v)
	case []byte:
		return "x:" + strings.ToUpper(hex.EncodeToString(v))
	}
	return fmt.Sprintf("unexpected %T", v)
}

var interopPaths = [][]string{
	{"country", "iso_code"},
	{"subdivisions", "0", "iso_code"},
	{"subdivisions", "-1", "iso_code"},
	{"country", "names", "ja"},
	{"tags", "1"},
	{"nums", "-2"},
	{"location"},
	{"missing", "x"},
}

func TestInteropMaxMind(t *testing.T) {
	interopTools(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "writer.pl")
	if err := os.WriteFile(script, []byte(perlWriter), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ipVersion, recordSize int
		alias                 bool
	}{
		{4, 24, false}, {4, 28, false}, {4, 32, false},
		{6, 24, true}, {6, 28, true}, {6, 32, false},
	} {
		name := fmt.Sprintf("v%d-rs%d-alias=%v", c.ipVersion, c.recordSize, c.alias)
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the time goes into starting mmdblookup
			file := filepath.Join(dir, name+".mmdb")
			alias := "0"
			if c.alias {
				alias = "1"
			}
			if out, err := hostexec.CombinedOutput(t, func() *exec.Cmd {
				return exec.Command("perl", script, file, strconv.Itoa(c.ipVersion), strconv.Itoa(c.recordSize), alias)
			}); err != nil {
				t.Fatalf("perl writer: %v: %s", err, out)
			}
			r, err := Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.Verify(); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			m := r.Metadata()
			if m.DatabaseType != "Interop-City" || m.IPVersion != uint(c.ipVersion) || m.RecordSize != uint(c.recordSize) || m.Description["en"] != "interop test" {
				t.Errorf("metadata %+v", m)
			}
			// The addresses: both ends of every network, the addresses
			// just outside them, and a few more.
			var ips []netip.Addr
			nets := 0
			if err := r.Networks(func(p netip.Prefix, _ Offset) bool {
				nets++
				if c.alias && p.Addr().Is6() && (strings.HasPrefix(p.String(), "::ffff:") || strings.HasPrefix(p.String(), "2002:")) {
					t.Errorf("alias %v reported", p)
				}
				last := lastAddr(p)
				ips = append(ips, p.Addr(), last, p.Addr().Prev(), last.Next())
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if nets < 45 {
				t.Errorf("only %d networks", nets)
			}
			for _, s := range []string{"1.2.3.4", "1.2.3.200", "::ffff:1.2.3.4", "8.8.8.8", "192.168.1.1", "100.7.8.9",
				"2001:db8::1", "2001:db8:1::1", "2a0f::1", "2002:102:304::1", "::ffff:100.1.0.0", "::1.2.3.4",
				"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::", "0.0.0.0", "255.255.255.255"} {
				ips = append(ips, mustAddr(s))
			}
			compared := 0
			for i, ip := range ips {
				if !ip.IsValid() {
					continue
				}
				want, found := mmdblookup(t, file, ip)
				got, err := r.Lookup(ip)
				if err != nil {
					t.Fatalf("Lookup(%s): %v", ip, err)
				}
				if found != (got != nil) || found && !reflect.DeepEqual(canonical(got), want) {
					t.Errorf("Lookup(%s) = %v\nmmdblookup: %v (found %v)", ip, canonical(got), want, found)
				}
				compared++
				if i%4 != 0 && i < len(ips)-16 {
					continue // the paths at the start of each network only
				}
				for _, path := range interopPaths {
					want, found := mmdblookup(t, file, ip, path...)
					got, ok, err := r.LookupPath(ip, path...)
					if err != nil || ok != found || found && !reflect.DeepEqual(canonical(got), want) {
						t.Errorf("LookupPath(%s, %q) = %v, %v, %v\nmmdblookup: %v (found %v)", ip, path, canonical(got), ok, err, want, found)
					}
					compared++
				}
			}
			t.Logf("%d networks, %d lookups compared with mmdblookup", nets, compared)
		})
	}
}
