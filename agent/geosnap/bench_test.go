package geosnap

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"openflare/internal/mmdb"
	"openflare/testing/benchkit"
	"openflare/testing/geodb"
)

// fullSizeNetworks is the size of the generated databases: more networks
// than GeoLite2-Country has (about 300 000 after merging).
const fullSizeNetworks = 400_000

// BenchmarkCompileFullSize compiles a rule set of ten countries and five
// regions from a full-size City and Country database, and reports the
// networks walked per second and the process's peak RSS while compiling
// (`make bench` runs it under the agent's own GOGC and memory limit). The
// databases are about 7 MiB each.
func BenchmarkCompileFullSize(b *testing.B) {
	if why := geodb.Available(); why != "" {
		b.Skip(why)
	}
	countries := []string{"US", "DE", "FR", "GB", "JP", "CN", "BR", "IN", "RU", "IT", "NL", "SE", "PL", "ES", "CA"}
	dir := b.TempDir()
	city, country := filepath.Join(dir, "city.mmdb"), filepath.Join(dir, "country.mmdb")
	if err := geodb.Write(city, geodb.Options{Type: "GeoLite2-City", Epoch: 1}, geodb.Synthetic(fullSizeNetworks, 1, countries)); err != nil {
		b.Fatal(err)
	}
	if err := geodb.Write(country, geodb.Options{Type: "GeoLite2-Country", Epoch: 1}, geodb.Synthetic(fullSizeNetworks, 2, countries)); err != nil {
		b.Fatal(err)
	}
	src := Sources{City: open(b, city), Country: open(b, country)}
	walked := 0
	for _, r := range []*mmdb.Reader{src.City, src.Country} {
		r.Networks(func(netip.Prefix, mmdb.Offset) bool { walked++; return true })
	}
	codes := Codes{Countries: countries[:10], Regions: []string{"US-S1", "DE-S2", "FR-S3", "JP-S4", "CN-S5"}}
	label := strings.Repeat("b", 64)
	// Peak RSS from here on (writing 5 to clear_refs resets VmHWM).
	// The generated networks are garbage now; what the test harness kept
	// goes back before the baseline is taken.
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	before := benchkit.StatusKiB(os.Getpid(), "VmRSS:")
	b.ResetTimer()
	var size int
	for b.Loop() {
		data, err := Compile(src, codes, label)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.StopTimer()
	b.ReportMetric(float64(walked)*float64(b.N)/b.Elapsed().Seconds(), "networks/s")
	b.ReportMetric(float64(size)/(1<<20), "MiB-file")
	// The databases' pages the walk touched count as (shared, file-backed)
	// RSS too; the rest is the range lists and the file being built.
	b.ReportMetric(float64(before)/1024, "MiB-RSS-before")
	b.ReportMetric(float64(benchkit.StatusKiB(os.Getpid(), "VmHWM:"))/1024, "MiB-peak-RSS")
}
