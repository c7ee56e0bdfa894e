package main

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
)

// A Sample is one input of the corpus and the place in a request it goes.
type Sample struct {
	Category string
	Shape    string // see shapes in request.go
	Source   string // file:line, or the /usr/share/doc file it was cut from
	// Text is the input. Encoded (every file sample) means it is written
	// as a URL-encoded query value, libinjection's convention: it goes
	// into URL-ish places (query, form, path, cookie, header) as it is,
	// and Value decodes it for the others (JSON, XML, multipart parts).
	// Generated benign text is not encoded: a browser encodes it.
	Text    string
	Encoded bool
	// Filename and FileType are the file part of a multipart upload.
	Filename, FileType string
}

// Value is the input as the application reads it.
func (s Sample) Value() string {
	if s.Encoded {
		return urlDecode(s.Text)
	}
	return s.Text
}

// A Category is a row of the report.
type Category struct {
	Name    string // what -misses takes and the JSON names it
	Title   string
	Attack  bool
	Samples []Sample
}

// urlDecode decodes '+' and %XX as a query decoder does, leaving a '%'
// that does not start an escape as it is (libinjection's files have some).
func urlDecode(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// A line of a sample file.
type line struct {
	text string
	no   int
}

// readLines returns a sample file's lines that are neither empty nor
// '#' comments, and the shapes its "#shapes:" comment names.
func readLines(data []byte) (lines []line, shapes []string) {
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(nil, 1<<20)
	for no := 1; s.Scan(); no++ {
		t := strings.TrimRight(s.Text(), "\r")
		if rest, ok := strings.CutPrefix(t, "#shapes:"); ok {
			shapes = strings.Fields(rest)
		}
		if t == "" || t[0] == '#' {
			continue
		}
		lines = append(lines, line{t, no})
	}
	return lines, shapes
}

// sampleDown keeps at most n of items, chosen by a shuffle seeded with
// seed and name (so one file's choice does not move when another file
// changes), in their original order.
func sampleDown[T any](items []T, n int, seed uint64, name string) []T {
	if n < 0 || len(items) <= n {
		return items
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	keep := rand.New(rand.NewPCG(seed, h.Sum64())).Perm(len(items))[:n]
	slices.Sort(keep)
	out := make([]T, n)
	for i, k := range keep {
		out[i] = items[k]
	}
	return out
}

// libinjection's categories: which files, the shapes their samples take
// in turn.
var libinjectionSets = []struct {
	name, title, glob string
	shapes            []string
}{
	{"sqli", "SQL injection", "sqli-*.txt", []string{"query", "form", "json", "cookie"}},
	{"xss", "XSS", "xss-*.txt", []string{"query", "form", "json"}},
}

// loadLibinjection reads the SQLi and XSS files of dir (at most perFile
// samples from each) and false_positives.txt.
func loadLibinjection(dir fs.FS, perFile int, seed uint64) (attacks []Category, fp Category, err error) {
	for _, set := range libinjectionSets {
		names, err := fs.Glob(dir, set.glob)
		if err != nil {
			return nil, fp, err
		}
		if len(names) == 0 {
			return nil, fp, fmt.Errorf("no %s in the libinjection corpus", set.glob)
		}
		c := Category{Name: set.name, Title: set.title + " (libinjection)", Attack: true}
		for _, name := range names {
			data, err := fs.ReadFile(dir, name)
			if err != nil {
				return nil, fp, err
			}
			lines, _ := readLines(data)
			c.Samples = append(c.Samples, fileSamples(set.name, name, sampleDown(lines, perFile, seed, name), set.shapes)...)
		}
		attacks = append(attacks, dedupe(c))
	}
	data, err := fs.ReadFile(dir, "false_positives.txt")
	if err != nil {
		return nil, fp, err
	}
	lines, _ := readLines(data)
	fp = dedupe(Category{
		Name: "benign-fp", Title: "benign: libinjection false_positives.txt",
		Samples: fileSamples("benign-fp", "false_positives.txt", lines, []string{"query", "form", "json"}),
	})
	return attacks, fp, nil
}

// fileSamples makes the samples of one file, its shapes taken in turn.
func fileSamples(category, file string, lines []line, shapes []string) []Sample {
	out := make([]Sample, len(lines))
	for i, l := range lines {
		out[i] = Sample{Category: category, Shape: shapes[i%len(shapes)], Source: fmt.Sprintf("%s:%d", file, l.no), Text: l.text, Encoded: true}
	}
	return out
}

// dedupe drops repeated inputs: the libinjection files overlap, and so do
// the pieces cut from the docs.
func dedupe(c Category) Category {
	seen := map[string]bool{}
	kept := c.Samples[:0]
	for _, s := range c.Samples {
		k := s.Filename + "\x00" + s.FileType + "\x00" + s.Text
		if !seen[k] {
			seen[k] = true
			kept = append(kept, s)
		}
	}
	c.Samples = kept
	return c
}

// Our own attack samples, one file or more per category:
// <category>[.<part>].txt, each with a "#shapes:" comment.
//
//go:embed testdata/*.txt
var testdata embed.FS

// ownSets are the categories of testdata/, in report order.
var ownSets = []struct{ name, title string }{
	{"cmdi", "command injection"},
	{"lfi", "path traversal / LFI"},
	{"rfi", "remote file inclusion"},
	{"crlf", "CRLF injection"},
	{"php", "PHP injection"},
	{"java", "Java: Log4Shell, OGNL, SpEL, deserialisation"},
	{"upload", "malicious upload"},
	{"ssrf", "SSRF"},
	{"xxe", "XXE"},
}

// loadOwn reads testdata/.
func loadOwn(dir fs.FS) ([]Category, error) {
	var out []Category
	for _, set := range ownSets {
		names, err := fs.Glob(dir, set.name+".*txt")
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no sample file for %s", set.name)
		}
		c := Category{Name: set.name, Title: set.title, Attack: true}
		for _, name := range names {
			data, err := fs.ReadFile(dir, name)
			if err != nil {
				return nil, err
			}
			lines, shapes := readLines(data)
			if len(shapes) == 0 {
				return nil, fmt.Errorf("%s: no #shapes: line", name)
			}
			for _, sh := range shapes {
				if !knownShape(sh) {
					return nil, fmt.Errorf("%s: unknown shape %q", name, sh)
				}
			}
			samples := fileSamples(set.name, path.Base(name), lines, shapes)
			for i := range samples {
				if samples[i].Shape != "multipart" {
					continue
				}
				// An upload is "filename<TAB>part Content-Type<TAB>content",
				// the first two as they go into the part's headers.
				f := strings.SplitN(samples[i].Text, "\t", 3)
				if len(f) != 3 {
					return nil, fmt.Errorf("%s: not filename<TAB>type<TAB>content", samples[i].Source)
				}
				samples[i].Filename, samples[i].FileType, samples[i].Text = f[0], f[1], f[2]
			}
			c.Samples = append(c.Samples, samples...)
		}
		out = append(out, c)
	}
	return out, nil
}
