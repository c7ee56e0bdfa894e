// Package geodb writes GeoIP databases for tests and benchmarks with
// MaxMind's own writer (Debian libmaxmind-db-writer-perl), so that what the
// agent compiles from them is checked against files it did not write.
package geodb

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// Network is one network of a database and the codes of its record; an
// empty Subdivision leaves subdivisions out, an empty Country leaves the
// country's iso_code out (a record with names only).
type Network struct {
	Prefix      netip.Prefix
	Country     string
	Subdivision string
}

// Options describe the database file.
type Options struct {
	// Type is the database_type, e.g. "GeoLite2-City".
	Type  string
	Epoch int64
	// IPv4Only writes an IPv4 tree; otherwise an IPv6 tree with
	// ::ffff:0:0/96 and 2002::/16 aliased to the IPv4 subtree, as
	// MaxMind's published databases are.
	IPv4Only bool
}

// The script reads "prefix TAB country TAB subdivision" lines on stdin.
const script = `use strict; use warnings;
use MaxMind::DB::Writer::Tree;
my ($out, $type, $epoch, $v4only) = @ARGV;
my %types = (country => 'map', iso_code => 'utf8_string', subdivisions => ['array', 'map'], names => 'map', en => 'utf8_string');
my $tree = MaxMind::DB::Writer::Tree->new(
  ip_version => ($v4only ? 4 : 6), record_size => 28, database_type => $type,
  languages => ['en'], description => { en => 'openflare test database' },
  map_key_type_callback => sub { $types{$_[0]} },
  alias_ipv6_to_ipv4 => ($v4only ? 0 : 1), remove_reserved_networks => 0,
);
$tree->_set_build_epoch($epoch);
while (my $line = <STDIN>) {
  chomp $line;
  my ($net, $cc, $sub) = split /\t/, $line, -1;
  my $r = { country => { names => { en => "Country $cc" } } };
  $r->{country}{iso_code} = $cc if $cc ne '';
  $r->{subdivisions} = [ { iso_code => $sub } ] if $sub ne '';
  $tree->insert_network($net, $r);
}
open my $fh, '>:raw', $out or die;
$tree->write_tree($fh);
close $fh or die;
`

// Available reports why databases cannot be written here ("" when they can).
func Available() string {
	if out, err := exec.Command("perl", "-MMaxMind::DB::Writer::Tree", "-e", "1").CombinedOutput(); err != nil {
		return fmt.Sprintf("MaxMind's Perl writer is not installed (Debian package libmaxmind-db-writer-perl): %v: %s", err, bytes.TrimSpace(out))
	}
	return ""
}

// Write writes a database holding nets to path (later networks override
// earlier ones where they overlap).
func Write(path string, o Options, nets []Network) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".geodb-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pl := filepath.Join(dir, "writer.pl")
	if err := os.WriteFile(pl, []byte(script), 0o600); err != nil {
		return err
	}
	var in bytes.Buffer
	w := bufio.NewWriter(&in)
	for _, n := range nets {
		fmt.Fprintf(w, "%s\t%s\t%s\n", n.Prefix.Masked(), n.Country, n.Subdivision)
	}
	w.Flush()
	v4 := "0"
	if o.IPv4Only {
		v4 = "1"
	}
	cmd := exec.Command("perl", pl, path, o.Type, strconv.FormatInt(o.Epoch, 10), v4)
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("perl writer: %w: %s", err, out)
	}
	return nil
}

// Synthetic returns n disjoint networks spread over the IPv4 space (/24s
// and larger, in runs of one country as real databases have) and a share
// of IPv6 /32s to /48s, with countries drawn from codes and a subdivision
// for every network. The same seed gives the same networks.
func Synthetic(n int, seed uint64, codes []string) []Network {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Network, 0, n)
	v6 := n / 8
	// IPv4: walk upwards from 1.0.0.0 in /24 steps, leaving gaps.
	a := uint32(1 << 24)
	for len(out) < n-v6 && a < 0xdf000000 {
		cc := codes[r.IntN(len(codes))]
		run := 1 + r.IntN(8)
		for i := 0; i < run && len(out) < n-v6; i++ {
			a4 := [4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}
			out = append(out, Network{netip.PrefixFrom(netip.AddrFrom4(a4), 24), cc, "S" + strconv.Itoa(r.IntN(40))})
			a += 256
		}
		a += 256 * uint32(r.IntN(3))
	}
	// IPv6: consecutive /48s under 2a00::/12, in runs.
	hi := uint64(0x2a00) << 48
	for len(out) < n {
		cc := codes[r.IntN(len(codes))]
		run := 1 + r.IntN(8)
		for i := 0; i < run && len(out) < n; i++ {
			var b [16]byte
			for j := range 8 {
				b[j] = byte(hi >> (56 - 8*j))
			}
			out = append(out, Network{netip.PrefixFrom(netip.AddrFrom16(b), 48), cc, "S" + strconv.Itoa(r.IntN(40))})
			hi += 1 << 16
		}
		hi += uint64(r.IntN(3)) << 16
	}
	return out
}
