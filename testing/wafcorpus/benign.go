package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The benign kinds: what real users type or send, cut from real text.
var benignKinds = []struct {
	name, title string
	shapes      []string
}{
	{"benign-search", "benign: search terms", []string{"query"}},
	{"benign-names", "benign: names", []string{"form", "json", "query"}},
	{"benign-email", "benign: e-mail addresses", []string{"form", "json"}},
	{"benign-sentences", "benign: sentences", []string{"query", "form", "json"}},
	{"benign-code", "benign: code and shell snippets", []string{"form", "json"}},
	{"benign-urls", "benign: URLs", []string{"query", "form", "json", "header:Referer"}},
	{"benign-json", "benign: JSON documents", []string{"jsondoc"}},
	{"benign-xml", "benign: XML documents", []string{"xml"}},
	{"benign-upload", "benign: text file uploads", []string{"multipart"}},
}

// maxDocBytes bounds what is read of one document: a few long changelogs
// would otherwise make most of the corpus, and the reading slow.
const maxDocBytes = 64 << 10

// A doc is one text file of the documentation tree.
type doc struct {
	path string // as under /usr/share/doc
	text string
}

// readDocs returns the text files of dir (gzip-compressed ones
// decompressed) in path order, each cut at maxDocBytes. Links are not
// followed: /usr/share/doc links packages of one source to one directory,
// which would only repeat it.
func readDocs(dir fs.FS) ([]doc, error) {
	var docs []doc
	err := fs.WalkDir(dir, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || skipExt[path.Ext(strings.TrimSuffix(p, ".gz"))] {
			return err
		}
		f, err := dir.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		var r io.Reader = f
		if strings.HasSuffix(p, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				return nil // not really gzip: not text either
			}
			r = zr
		}
		b, err := io.ReadAll(io.LimitReader(r, maxDocBytes))
		if err != nil && len(b) == 0 {
			return nil
		}
		// A cut may split the last UTF-8 sequence; anything else invalid
		// is not text.
		if i := bytes.LastIndexByte(b, '\n'); i > 0 && len(b) == maxDocBytes {
			b = b[:i+1]
		}
		if bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) {
			return nil
		}
		docs = append(docs, doc{p, string(b)})
		return nil
	})
	return docs, err
}

// skipExt are documentation files that are not plain text a user would type.
var skipExt = map[string]bool{
	".html": true, ".htm": true, ".xhtml": true, ".css": true, ".pdf": true, ".ps": true, ".png": true, ".jpg": true,
	".gif": true, ".svg": true, ".ico": true, ".bz2": true, ".xz": true, ".zip": true, ".jar": true, ".mo": true, ".dvi": true,
}

// codeExt are files whose every line is code or configuration.
var codeExt = map[string]bool{
	".c": true, ".h": true, ".py": true, ".pl": true, ".pm": true, ".rb": true, ".sh": true, ".lua": true, ".go": true, ".js": true,
	".java": true, ".php": true, ".conf": true, ".cfg": true, ".ini": true, ".el": true, ".tcl": true, ".awk": true, ".sed": true,
	".mk": true, ".cmake": true, ".json": true, ".yaml": true, ".yml": true, ".toml": true, ".sql": true, ".xml": true,
}

var (
	// A name is two to four capitalised words before an e-mail address in
	// angle brackets, as changelog sign-offs and copyright files write them.
	nameRE = regexp.MustCompile(`(\p{Lu}[\p{L}'.-]+(?: \p{Lu}[\p{L}'.-]+){1,3}) $`)
	urlRE  = regexp.MustCompile(`https?://[^\s<>"'()\[\]{}\\]+`)
	wordRE = regexp.MustCompile(`^[\p{L}][\p{L}'-]*$`)
	// Code is a line with at least one of these.
	codeChars = "(){};=$|&[]"
)

// emailsAndNames finds the e-mail addresses of text and the names written
// before those in angle brackets. It looks around each '@' rather than
// running a regular expression over the whole text, which takes seconds
// on /usr/share/doc.
func emailsAndNames(text string) (emails, names []string) {
	local := func(c byte) bool { return isAlnum(c) || strings.IndexByte("._+-", c) >= 0 }
	domain := func(c byte) bool { return isAlnum(c) || c == '.' || c == '-' }
	for i := 0; ; i++ {
		at := strings.IndexByte(text[i:], '@')
		if at < 0 {
			return emails, names
		}
		at += i
		i = at
		start, end := at, at+1
		for start > 0 && local(text[start-1]) {
			start--
		}
		for end < len(text) && domain(text[end]) {
			end++
		}
		addr := strings.TrimRight(text[start:end], ".-")
		dot := strings.LastIndexByte(addr, '.')
		if start == at || dot < at-start+2 || len(addr)-dot < 3 || !allLetters(addr[dot+1:]) {
			continue
		}
		emails = append(emails, addr)
		if start >= 2 && text[start-1] == '<' {
			if m := nameRE.FindStringSubmatch(text[max(0, start-80) : start-1]); m != nil {
				names = append(names, m[1])
			}
		}
	}
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func allLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if !('a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z') {
			return false
		}
	}
	return true
}

// A piece is a cut of a doc.
type piece struct{ text, from string }

// pools are the pieces cut from the docs, by kind.
type pools struct {
	names, emails, urls, sentences, code []piece
	uploads                              []doc
}

func cut(docs []doc) *pools {
	p := &pools{}
	for _, d := range docs {
		emails, names := emailsAndNames(d.text)
		for _, e := range emails {
			p.emails = append(p.emails, piece{e, d.path})
		}
		for _, n := range names {
			p.names = append(p.names, piece{n, d.path})
		}
		for _, m := range urlRE.FindAllString(d.text, -1) {
			if m = strings.TrimRight(m, ".,;:!?"); len(m) > len("https://x.y") {
				p.urls = append(p.urls, piece{m, d.path})
			}
		}
		for _, s := range sentences(d.text) {
			p.sentences = append(p.sentences, piece{s, d.path})
		}
		for _, s := range codeSnippets(d) {
			p.code = append(p.code, piece{s, d.path})
		}
		if base := path.Base(d.path); strings.HasPrefix(strings.ToLower(base), "readme") || strings.HasPrefix(base, "changelog") || base == "copyright" || base == "NEWS.gz" {
			p.uploads = append(p.uploads, d)
		}
	}
	return p
}

// sentences splits the prose of text (paragraphs, wrapped lines joined)
// into sentences of four words or more that are mostly letters.
func sentences(text string) []string {
	var out []string
	for _, para := range strings.Split(text, "\n\n") {
		para = strings.Join(strings.Fields(para), " ")
		for start, i := 0, 0; i < len(para); i++ {
			if i+1 < len(para) && !(strings.IndexByte(".!?", para[i]) >= 0 && para[i+1] == ' ') {
				continue
			}
			s := strings.TrimLeft(para[start:i+1], "*-+ ")
			start = i + 2
			if n := len(s); n < 25 || n > 250 || strings.Count(s, " ") < 3 || !unicode.IsUpper(firstRune(s)) {
				continue
			}
			letters := 0
			for _, r := range s {
				if unicode.IsLetter(r) || r == ' ' {
					letters++
				}
			}
			if letters*10 >= utf8.RuneCountInString(s)*8 {
				out = append(out, s)
			}
		}
	}
	return out
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

// codeSnippets returns runs of one to five code lines: every line of a
// source or configuration file, indented lines (code blocks) elsewhere,
// each with at least one of codeChars.
func codeSnippets(d doc) []string {
	all := codeExt[path.Ext(strings.TrimSuffix(d.path, ".gz"))] || strings.Contains(d.path, "/examples/")
	var out, run []string
	flush := func() {
		if len(run) > 0 {
			out = append(out, strings.Join(run, "\n"))
		}
		run = nil
	}
	s := bufio.NewScanner(strings.NewReader(d.text))
	for s.Scan() {
		l := strings.TrimRight(s.Text(), " \t")
		code := (all || strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")) && strings.ContainsAny(l, codeChars) && len(strings.TrimSpace(l)) >= 8 && len(l) <= 160
		if !code {
			flush()
			continue
		}
		if run = append(run, l); len(run) == 5 {
			flush()
		}
	}
	flush()
	return out
}

// loadBenign cuts perKind samples of each benign kind from the docs of
// dir, chosen with seed.
func loadBenign(dir fs.FS, perKind int, seed uint64) ([]Category, error) {
	docs, err := readDocs(dir)
	if err != nil {
		return nil, err
	}
	p := cut(docs)
	if len(p.sentences) == 0 || len(p.names) == 0 || len(p.urls) == 0 || len(p.emails) == 0 {
		return nil, fmt.Errorf("too little text in the documentation (%d files)", len(docs))
	}
	rng := rand.New(rand.NewPCG(seed, 0x62656e69676e)) // "benign"
	pick := func(from []piece) piece { return from[rng.IntN(len(from))] }
	var out []Category
	for _, k := range benignKinds {
		var made []Sample
		add := func(text, from string) { made = append(made, Sample{Category: k.name, Text: text, Source: from}) }
		switch k.name {
		case "benign-search":
			for _, s := range sampleDown(p.sentences, 4*perKind, seed, k.name) {
				if t := searchTerms(s.text, rng); t != "" {
					add(t, s.from)
				}
			}
		case "benign-names":
			for _, s := range p.names {
				add(s.text, s.from)
			}
		case "benign-email":
			for _, s := range p.emails {
				add(s.text, s.from)
			}
		case "benign-sentences":
			for _, s := range p.sentences {
				add(s.text, s.from)
			}
		case "benign-code":
			for _, s := range p.code {
				add(s.text, s.from)
			}
		case "benign-urls":
			for _, s := range p.urls {
				add(s.text, s.from)
			}
		case "benign-json":
			for range 2 * perKind {
				s := pick(p.sentences)
				add(jsonDoc(rng, s.text, pick(p.names).text, pick(p.emails).text, pick(p.urls).text, searchTerms(pick(p.sentences).text, rng)), s.from)
			}
		case "benign-xml":
			for range 2 * perKind {
				s := pick(p.sentences)
				add(xmlDoc(rng, s.text, pick(p.names).text, pick(p.emails).text, pick(p.urls).text), s.from)
			}
		case "benign-upload":
			for _, d := range p.uploads {
				made = append(made, Sample{Category: k.name, Text: head(d.text, 2048), Source: d.path,
					Filename: uploadName(d.path), FileType: "text/plain"})
			}
		}
		c := dedupe(Category{Name: k.name, Title: k.title, Samples: made})
		c.Samples = sampleDown(c.Samples, perKind, seed, k.name)
		for i := range c.Samples {
			c.Samples[i].Shape = k.shapes[i%len(k.shapes)]
		}
		out = append(out, c)
	}
	return out, nil
}

// searchTerms is one to four consecutive words of a sentence, as typed
// into a search box (lower case half of the time).
func searchTerms(sentence string, rng *rand.Rand) string {
	var words []string
	for _, w := range strings.Fields(sentence) {
		if w = strings.Trim(w, `.,;:!?"()`); wordRE.MatchString(w) {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return ""
	}
	n := 1 + rng.IntN(min(4, len(words)))
	i := rng.IntN(len(words) - n + 1)
	t := strings.Join(words[i:i+n], " ")
	if rng.IntN(2) == 0 {
		t = strings.ToLower(t)
	}
	return t
}

// jsonDoc is the body of an API call of one of a few kinds, filled with
// real text.
func jsonDoc(rng *rand.Rand, sentence, name, email, url, terms string) string {
	var v any
	switch rng.IntN(3) {
	case 0:
		v = map[string]any{"author": name, "email": email, "body": sentence, "notify": rng.IntN(2) == 0}
	case 1:
		v = map[string]any{"customer": map[string]any{"name": name, "email": email, "website": url},
			"items": []any{map[string]any{"sku": fmt.Sprintf("SKU-%05d", rng.IntN(100000)), "qty": 1 + rng.IntN(5)}}, "note": sentence}
	default:
		v = map[string]any{"query": terms, "filters": map[string]any{"tags": strings.Fields(strings.ToLower(terms))}, "page": 1 + rng.IntN(20), "referrer": url}
	}
	return jsonText(v)
}

// xmlDoc is an order or a feed item, filled with real text.
func xmlDoc(rng *rand.Rand, sentence, name, email, url string) string {
	esc := func(s string) string {
		var b strings.Builder
		xml.EscapeText(&b, []byte(s))
		return b.String()
	}
	if rng.IntN(2) == 0 {
		return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<order id="%d"><customer><name>%s</name><email>%s</email></customer><note>%s</note></order>`, rng.IntN(100000), esc(name), esc(email), esc(sentence))
	}
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><item><title>%s</title><link>%s</link><description>%s</description></item></channel></rss>`, esc(name), esc(url), esc(sentence))
}

// head is at most n bytes of s, cut at a line end.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if i := strings.LastIndexByte(s[:n], '\n'); i > 0 {
		return s[:i+1]
	}
	return s[:n]
}

// uploadName is the name a user would give a saved copy of a doc:
// curl/changelog.Debian.gz → curl-changelog.Debian.txt.
func uploadName(p string) string {
	dir, base := path.Split(strings.TrimSuffix(p, ".gz"))
	name := path.Base(dir) + "-" + base
	if !slices.Contains([]string{".txt", ".md"}, path.Ext(name)) {
		name += ".txt"
	}
	return name
}
