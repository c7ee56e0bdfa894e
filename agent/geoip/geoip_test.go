package geoip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"openflare/agent/backoff"
)

// perlWriter writes a test database with MaxMind's own writer (Debian
// libmaxmind-db-writer-perl): perl writer.pl OUT TYPE EPOCH VARIANT.
const perlWriter = `use strict; use warnings;
use MaxMind::DB::Writer::Tree;
my ($out, $type, $epoch, $variant) = @ARGV;
my %types = (country => 'map', iso_code => 'utf8_string', subdivisions => ['array', 'map'], names => 'map', en => 'utf8_string');
my $tree = MaxMind::DB::Writer::Tree->new(
  ip_version => 6, record_size => 24, database_type => $type,
  languages => ['en'], description => { en => 'geoip test' },
  map_key_type_callback => sub { $types{$_[0]} },
  alias_ipv6_to_ipv4 => 1, remove_reserved_networks => 0,
);
$tree->_set_build_epoch($epoch);
my @cc = $variant eq 'b' ? ('FR', 'JP', 'BR') : ('US', 'DE', 'GB');
sub rec { my ($cc, $sub) = @_;
  my $r = { country => { iso_code => $cc, names => { en => "Country $cc" } } };
  $r = { country => { names => { en => "Country $cc" } } } if $variant eq 'n';
  $r->{subdivisions} = [ { iso_code => $sub } ] if $type =~ /City/;
  return $r;
}
$tree->insert_network('1.0.0.0/8', rec($cc[0], 'CA'));
$tree->insert_network('2.16.0.0/16', rec($cc[1], 'BY'));
for my $i (0..30) { $tree->insert_network("100.$i.0.0/16", rec($cc[$i % 3], "S$i")); }
$tree->insert_network('2001:db8::/32', rec($cc[2], 'ENG'));
open my $fh, '>:raw', $out or die;
$tree->write_tree($fh);
close $fh or die;
`

type dbs struct {
	country1, country2, countryOld, city, noCountry []byte
}

var (
	dbOnce sync.Once
	dbSet  dbs
	dbErr  error
	dbSkip string
)

// testDBs writes the test databases once per run.
func testDBs(t *testing.T) dbs {
	t.Helper()
	dbOnce.Do(func() {
		if out, err := exec.Command("perl", "-MMaxMind::DB::Writer::Tree", "-e", "1").CombinedOutput(); err != nil {
			dbSkip = fmt.Sprintf("MaxMind's Perl writer is not installed (Debian package libmaxmind-db-writer-perl): %v: %s", err, bytes.TrimSpace(out))
			return
		}
		dir, err := os.MkdirTemp("", "geoip-test-dbs")
		if err != nil {
			dbErr = err
			return
		}
		defer os.RemoveAll(dir)
		script := filepath.Join(dir, "writer.pl")
		if dbErr = os.WriteFile(script, []byte(perlWriter), 0o600); dbErr != nil {
			return
		}
		write := func(typ string, epoch int, variant string) []byte {
			if dbErr != nil {
				return nil
			}
			out := filepath.Join(dir, fmt.Sprintf("%s-%d-%s.mmdb", typ, epoch, variant))
			if b, err := exec.Command("perl", script, out, typ, strconv.Itoa(epoch), variant).CombinedOutput(); err != nil {
				dbErr = fmt.Errorf("perl writer: %v: %s", err, b)
				return nil
			}
			b, err := os.ReadFile(out)
			dbErr = err
			return b
		}
		dbSet = dbs{
			country1:   write("GeoLite2-Country", 1_700_000_000, "a"),
			country2:   write("GeoLite2-Country", 1_700_100_000, "b"),
			countryOld: write("GeoLite2-Country", 1_600_000_000, "b"),
			city:       write("GeoLite2-City", 1_700_200_000, "a"),
			noCountry:  write("GeoLite2-Country", 1_700_300_000, "n"),
		}
	})
	if dbSkip != "" {
		t.Skip(dbSkip)
	}
	if dbErr != nil {
		t.Fatal(dbErr)
	}
	return dbSet
}

// server serves one body; tests change what it serves between updates.
type server struct {
	mu   sync.Mutex
	body []byte
	etag string
	// mode: "" normal, "truncate" (declares the full length, sends half),
	// "chunked" (no Content-Length), "stall" (half, then nothing),
	// "fail" (503).
	mode         string
	full, notMod int
	conds        []string
}

func (s *server) set(body []byte, etag, mode string) {
	s.mu.Lock()
	s.body, s.etag, s.mode = body, etag, mode
	s.mu.Unlock()
}

func (s *server) counts() (full, notMod int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full, s.notMod
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	body, etag, mode := s.body, s.etag, s.mode
	s.conds = append(s.conds, r.Header.Get("If-None-Match"))
	if mode == "fail" {
		s.mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if etag != "" && r.Header.Get("If-None-Match") == etag {
		s.notMod++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.full++
	s.mu.Unlock()
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
	switch mode {
	case "truncate":
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body[:len(body)/2])
	case "chunked":
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		w.Write(body[len(body)/2:])
	case "stall":
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}
}

func newRig(t *testing.T, want string) (*Refresher, *server) {
	t.Helper()
	s := &server{}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	u := &Refresher{
		Name: strings.ToLower(want), Path: filepath.Join(dir, "db", "GeoLite2-"+want+".mmdb"),
		URL: hs.URL + "/GeoLite2-" + want + ".mmdb", Type: want,
		Client: hs.Client(),
	}
	return u, s
}

func fileID(t *testing.T, path string) (ino uint64, mtime time.Time) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime()
}

func TestDownloadValidateRenameThen304(t *testing.T) {
	d := testDBs(t)
	u, s := newRig(t, "Country")
	var changed []string
	u.Changed = func(p string) { changed = append(changed, p) }
	s.set(d.country1, `"v1"`, "")
	if err := u.Check(); !errors.Is(err, ErrMissing) {
		t.Fatalf("Check before the download: %v", err)
	}
	res, err := u.Update(context.Background())
	if err != nil || res != Replaced {
		t.Fatalf("first update: %v %v", res, err)
	}
	got, err := os.ReadFile(u.Path)
	if err != nil || !bytes.Equal(got, d.country1) {
		t.Fatalf("database in place differs (%v)", err)
	}
	if fi, _ := os.Stat(u.Path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (nginx workers read it)", fi.Mode().Perm())
	}
	if _, err := os.Stat(u.Path + ".download"); !os.IsNotExist(err) {
		t.Errorf("temp file left behind: %v", err)
	}
	if len(changed) != 1 || changed[0] != u.Path {
		t.Errorf("Changed calls %v", changed)
	}
	if err := u.Check(); err != nil {
		t.Fatalf("Check after the download: %v", err)
	}
	ino, mtime := fileID(t, u.Path)
	time.Sleep(20 * time.Millisecond) // an mtime rewrite would show

	res, err = u.Update(context.Background())
	if err != nil || res != Unchanged {
		t.Fatalf("second update: %v %v", res, err)
	}
	full, notMod := s.counts()
	if full != 1 || notMod != 1 {
		t.Fatalf("server sent %d full answers and %d 304s, want 1 and 1", full, notMod)
	}
	if s.conds[1] != `"v1"` {
		t.Errorf("second request If-None-Match %q", s.conds[1])
	}
	ino2, mtime2 := fileID(t, u.Path)
	if ino2 != ino || !mtime2.Equal(mtime) {
		t.Errorf("file rewritten on 304: inode %d→%d, mtime %v→%v", ino, ino2, mtime, mtime2)
	}
	if len(changed) != 1 {
		t.Errorf("Changed called on 304")
	}

	// A newer database under a new ETag replaces it.
	s.set(d.country2, `"v2"`, "")
	if res, err := u.Update(context.Background()); err != nil || res != Replaced {
		t.Fatalf("third update: %v %v", res, err)
	}
	if got, _ := os.ReadFile(u.Path); !bytes.Equal(got, d.country2) {
		t.Fatal("newer database not in place")
	}
}

func TestSameBytesWithoutValidatorsNotRewritten(t *testing.T) {
	d := testDBs(t)
	u, s := newRig(t, "Country")
	s.set(d.country1, "", "")
	if _, err := u.Update(context.Background()); err != nil {
		t.Fatal(err)
	}
	ino, mtime := fileID(t, u.Path)
	time.Sleep(20 * time.Millisecond)
	if res, err := u.Update(context.Background()); err != nil || res != Unchanged {
		t.Fatalf("%v %v", res, err)
	}
	if ino2, mtime2 := fileID(t, u.Path); ino2 != ino || !mtime2.Equal(mtime) {
		t.Error("identical download renamed into place")
	}
}

func TestBadDownloadsRejectedOldKept(t *testing.T) {
	d := testDBs(t)
	corrupt := bytes.Clone(d.country2)
	// Garbage over the search tree: the metadata still parses, the tree
	// does not.
	for i := 0; i < len(corrupt)/3; i++ {
		corrupt[i] = 0xff
	}
	cases := []struct {
		name, mode string
		body       []byte
		maxSize    int64
		want       string
	}{
		{"corrupt", "", corrupt, 0, "invalid database"},
		{"garbage", "", []byte("<html>not found</html>"), 0, "invalid database"},
		{"wrong type", "", d.city, 0, `database type "GeoLite2-City", want one containing "Country"`},
		{"no country codes", "", d.noCountry, 0, "has a country code"},
		{"older build", "", d.countryOld, 0, "is older than the current database's"},
		{"truncated", "truncate", d.country2, 0, "truncated download"},
		{"oversized announced", "", d.country2, int64(len(d.country2) - 1), "bytes announced, the cap is"},
		{"oversized chunked", "chunked", d.country2, int64(len(d.country2) - 1), "larger than the cap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u, s := newRig(t, "Country")
			s.set(d.country1, `"good"`, "")
			if _, err := u.Update(context.Background()); err != nil {
				t.Fatal(err)
			}
			ino, _ := fileID(t, u.Path)
			u.MaxSize = c.maxSize
			u.Changed = func(string) { t.Error("Changed called for a rejected download") }
			s.set(c.body, `"bad"`, c.mode)
			res, err := u.Update(context.Background())
			if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), c.want) || res != Unchanged {
				t.Fatalf("got %v, %v; want ErrRejected mentioning %q", res, err, c.want)
			}
			t.Log(err)
			got, err := os.ReadFile(u.Path)
			if err != nil || !bytes.Equal(got, d.country1) {
				t.Fatalf("the good database was not kept byte-identical (%v)", err)
			}
			if ino2, _ := fileID(t, u.Path); ino2 != ino {
				t.Error("the good database was replaced")
			}
			if _, err := os.Stat(u.Path + ".download"); !os.IsNotExist(err) {
				t.Errorf("rejected temp file left behind: %v", err)
			}
			// The validators still describe the good file: no download.
			s.set(d.country1, `"good"`, "")
			if res, err := u.Update(context.Background()); err != nil || res != Unchanged {
				t.Fatalf("after the rejection: %v %v", res, err)
			}
		})
	}
}

func TestCityExpectedAcceptsCityRejectsCountry(t *testing.T) {
	d := testDBs(t)
	u, s := newRig(t, "City")
	s.set(d.country1, `"c"`, "")
	if _, err := u.Update(context.Background()); !errors.Is(err, ErrRejected) {
		t.Fatalf("country database accepted as City: %v", err)
	}
	if _, err := os.Stat(u.Path); !os.IsNotExist(err) {
		t.Fatalf("rejected database in place: %v", err)
	}
	s.set(d.city, `"city"`, "")
	if res, err := u.Update(context.Background()); err != nil || res != Replaced {
		t.Fatalf("%v %v", res, err)
	}
}

func TestStalledDownloadAborted(t *testing.T) {
	d := testDBs(t)
	u, s := newRig(t, "Country")
	u.StallTimeout = 200 * time.Millisecond
	s.set(d.country1, `"x"`, "stall")
	start := time.Now()
	_, err := u.Update(context.Background())
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("want a stall error, got %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("stall noticed after %v", el)
	}
	if _, err := os.Stat(u.Path); !os.IsNotExist(err) {
		t.Errorf("partial file in place: %v", err)
	}
	if _, err := os.Stat(u.Path + ".download"); !os.IsNotExist(err) {
		t.Errorf("temp file left behind: %v", err)
	}
}

func TestMissingAtStartReportedThenFetched(t *testing.T) {
	d := testDBs(t)
	u, s := newRig(t, "Country")
	s.set(d.country1, `"v1"`, "fail")
	u.Retry = backoff.Backoff{Min: 20 * time.Millisecond, Max: 50 * time.Millisecond}
	u.Interval = time.Hour
	reports := make(chan Status, 16)
	u.Report = func(st Status) { reports <- st }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	next := func() Status {
		select {
		case st := <-reports:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no report")
			return Status{}
		}
	}
	st := next() // at start
	if st.Present || !errors.Is(st.Err, ErrMissing) {
		t.Fatalf("start: %+v", st)
	}
	if got := u.Status(); got.Present {
		t.Fatalf("Status at start: %+v", got)
	}
	st = next() // the failed first attempt
	if st.Present || !errors.Is(st.Err, ErrMissing) || !strings.Contains(st.Err.Error(), "503") {
		t.Fatalf("after the failed attempt: %+v", st)
	}
	s.set(d.country1, `"v1"`, "")
	for st = next(); !st.Present; st = next() {
	}
	if st.Err != nil {
		t.Fatalf("fetched with error %v", st.Err)
	}
	if got, _ := os.ReadFile(u.Path); !bytes.Equal(got, d.country1) {
		t.Fatal("database not in place after the retry")
	}
}

func TestRunPresentWaitsForInterval(t *testing.T) {
	d := testDBs(t)
	u, s := newRig(t, "Country")
	s.set(d.country1, `"v1"`, "")
	if _, err := u.Update(context.Background()); err != nil {
		t.Fatal(err)
	}
	u.Interval = time.Hour
	reports := make(chan Status, 4)
	u.Report = func(st Status) { reports <- st }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	st := <-reports
	if !st.Present || st.Err != nil {
		t.Fatalf("start: %+v", st)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if full, notMod := s.counts(); full != 1 || notMod != 0 {
		t.Errorf("a restart with a fresh database asked the server (%d, %d)", full, notMod)
	}
}

func TestLastAddr(t *testing.T) {
	for in, want := range map[string]string{
		"1.0.0.0/8": "1.255.255.255", "10.1.2.3/32": "10.1.2.3", "2001:db8::/32": "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
		"0.0.0.0/0": "255.255.255.255", "100.3.0.0/17": "100.3.127.255",
	} {
		if got := lastAddr(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("lastAddr(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@h/x?token=1": "https://h/x",
		"https://h/a@b":           "https://h/a@b",
		"http://h/x#f":            "http://h/x",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%s) = %s, want %s", in, got, want)
		}
	}
}
