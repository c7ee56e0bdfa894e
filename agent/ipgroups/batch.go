package ipgroups

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"openflare/internal/jsonstream"
	"openflare/internal/rangefile"
)

// Batch takes the groups of one heartbeat reply, WebSocket push or E6
// reply while they are decoded, so that no list is ever in memory whole:
// each group's entries go through the sorter as they arrive, and when the
// group's object ends its checksum is verified over the sorted entries. A
// group that verifies waits in a scratch file, encoded as the snapshot
// stores it, until Push or Reconcile lands the batch. A Batch belongs to
// one goroutine; Close releases its files.
type Batch struct {
	s *Store
	// wanted says which ids may land: those in the snapshot for a push,
	// the referenced ones for a reconcile.
	wanted func(key string) bool
	sort   sorter
	out    *scratch // the verified groups, encoded
	bin    *scratch // their ranges, compiled
	// comp writes to bin. Its offsets run on over the batch, and so does
	// the compiled size bound: a batch over it holds more than the
	// snapshot's limit of JSON, and could not land anyway.
	comp     compiler
	verified map[string]verifiedGroup
	rejected []Rejection
	raw      json.RawMessage // the entry being read
	text     []byte          // an entry's unescaped text
	enc      []byte          // encoded entries not yet written
}

// verifiedGroup is a group whose checksum was recomputed and matched,
// ready to land.
type verifiedGroup struct {
	id       uint64
	checksum string
	raw      section          // in the batch's out file
	rec      rangefile.Record // its offsets in the batch's bin file
}

// maxEntry bounds one ip_list entry, and so what one sorted record costs.
// No address or network of the entry syntax takes a tenth of it.
const maxEntry = 1024

// maxRejections bounds the rejections a batch keeps: a reply may be a
// million malformed elements.
const maxRejections = 100

// maxReason bounds the text of the server's quoted in a reason.
const maxReason = 200

// Batch starts taking the groups of a heartbeat reply or a WebSocket push:
// only groups already in the snapshot may land (PROTOCOL 7.2). Its Decode
// reads them; Push lands them.
func (s *Store) Batch() *Batch {
	return s.newBatch(func(key string) bool {
		_, ok := s.currentSums()[key]
		return ok
	})
}

func (s *Store) newBatch(wanted func(key string) bool) *Batch {
	return &Batch{s: s, wanted: wanted, sort: sorter{dir: s.dir}, comp: compiler{sort: sorter{dir: s.dir}}, verified: make(map[string]verifiedGroup)}
}

// Close removes the batch's files; the batch is not used afterwards.
func (b *Batch) Close() {
	b.sort.close()
	b.out.close()
	b.comp.sort.close()
	b.bin.close()
}

// Decode reads the value dec is at, a JSON array of groups (null is none),
// and verifies each group as its object ends. A wrong-typed field, a
// non-string entry or one over maxEntry rejects that group alone; an
// error means the JSON itself is broken (or a scratch file failed), and
// the reply carrying it should be dropped.
func (b *Batch) Decode(dec *json.Decoder) error {
	return jsonstream.Array(dec, func() error { return b.element(dec) })
}

// head is a group element's fields other than its entries.
type head struct {
	id                       uint64
	name, typ, checksum      string
	enabled, idSeen, sumSeen bool
	malformed                string
}

func (h *head) mark(reason string) {
	if h.malformed == "" {
		h.malformed = bounded(reason)
	}
}

func (b *Batch) element(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		if tok != nil {
			b.reject(0, fmt.Sprintf("malformed: element is %v, not an object", tok))
		}
		return jsonstream.SkipRest(dec, tok)
	}
	if err := b.sort.reset(); err != nil {
		return err
	}
	var h head
	field := func(v any) error {
		err := dec.Decode(v)
		if typeErr := (*json.UnmarshalTypeError)(nil); errors.As(err, &typeErr) {
			h.mark(err.Error())
			return nil
		}
		return err
	}
	err = jsonstream.Fields(dec, func(key string) error {
		switch key {
		case "id":
			h.idSeen = true
			return field(&h.id)
		case "name":
			return field(&h.name)
		case "type":
			return field(&h.typ)
		case "enabled":
			return field(&h.enabled)
		case "checksum":
			h.sumSeen = true
			return field(&h.checksum)
		case "ip_list":
			return b.list(dec, &h)
		}
		return jsonstream.Skip(dec)
	})
	if err != nil {
		return err
	}
	switch {
	case h.malformed != "":
		b.reject(h.id, "malformed: "+h.malformed)
	case !b.useful(&h):
		b.s.log.Debug("ip group ignored: not in the snapshot, not referenced or unchanged", "id", h.id)
	default:
		return b.verify(&h)
	}
	return nil
}

// useful reports whether the group may change the snapshot: it is wanted,
// and not the version held already (once its checksum is known).
func (b *Batch) useful(h *head) bool {
	key := idKey(h.id)
	if !b.wanted(key) {
		return false
	}
	sum, held := b.s.currentSums()[key]
	return !held || !h.sumSeen || sum != h.checksum
}

// list reads an ip_list into the sorter, one entry at a time.
func (b *Batch) list(dec *json.Decoder, h *head) error {
	// A repeated key replaces the list.
	if err := b.sort.reset(); err != nil {
		return err
	}
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('[') {
		h.mark(fmt.Sprintf("ip_list is %v, not an array", tok))
		return jsonstream.SkipRest(dec, tok)
	}
	// The entries of a group that cannot land are read past, not sorted.
	keep := !h.idSeen || b.useful(h)
	for n := 0; dec.More(); n++ {
		if err := dec.Decode(&b.raw); err != nil {
			return err
		}
		if !keep || h.malformed != "" {
			continue
		}
		e, ok := stringValue(b.raw, &b.text)
		switch {
		case !ok:
			h.mark(fmt.Sprintf("ip_list element %d is not a string", n))
		case len(e) > maxEntry:
			h.mark(fmt.Sprintf("ip_list element %d is %d bytes, over the %d-byte limit for an entry", n, len(e), maxEntry))
		default:
			if err := b.sort.add(e); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // ']'
	return err
}

// verify hashes the group's entries in the order PROTOCOL 7.1 sorts them
// and, when that gives the checksum the server sent, keeps the group for
// landing, encoded as json.Marshal encodes a WAFIPGroup, its list sorted:
// the list's bytes are the ones hashed, so they are written once to both.
// The same pass compiles the group's ranges, so that landing it does not
// decode the list again.
func (b *Batch) verify(h *head) error {
	for _, sc := range []**scratch{&b.out, &b.bin} {
		if *sc == nil {
			var err error
			if *sc, err = newScratch(b.s.dir); err != nil {
				return err
			}
		}
	}
	b.comp.w = b.bin
	start := b.out.off
	name, _ := json.Marshal(h.name)
	typ, _ := json.Marshal(h.typ)
	if _, err := fmt.Fprintf(b.out, `{"id":%d,"name":%s,"type":%s,"enabled":%t,"ip_list":[`, h.id, name, typ, h.enabled); err != nil {
		return err
	}
	sum := sha256.New()
	fmt.Fprintf(sum, `{"id":%d,"enabled":%t,"ip_list":[`, h.id, h.enabled)
	enc := b.enc[:0]
	flush := func() error {
		sum.Write(enc)
		_, err := b.out.Write(enc)
		enc = enc[:0]
		return err
	}
	first := true
	err := b.sort.each(func(e []byte) error {
		if !first {
			enc = append(enc, ',')
		}
		first = false
		if err := b.comp.entry(e); err != nil {
			return err
		}
		enc = appendString(enc, e)
		if len(enc) < 32<<10 {
			return nil
		}
		return flush()
	})
	if err == nil {
		enc = append(enc, ']')
		err = flush()
	}
	b.enc = enc
	if err != nil {
		return err
	}
	rec, err := b.comp.group(h.id, h.enabled)
	if err != nil {
		return err
	}
	sum.Write([]byte("}"))
	got := hex.EncodeToString(sum.Sum(nil))
	if got != h.checksum {
		b.reject(h.id, fmt.Sprintf("checksum mismatch: server sent %q, content hashes to %s", h.checksum, got))
		return nil
	}
	if _, err := fmt.Fprintf(b.out, `,"checksum":"%s"}`, got); err != nil {
		return err
	}
	// Of several valid elements for one id the last wins.
	b.verified[idKey(h.id)] = verifiedGroup{id: h.id, checksum: got, raw: section{start, b.out.off - start}, rec: rec}
	return nil
}

func (b *Batch) reject(id uint64, reason string) {
	if len(b.rejected) < maxRejections {
		b.rejected = append(b.rejected, Rejection{ID: id, Reason: bounded(reason)})
	}
}

// bounded cuts a reason, which may quote the server, to a loggable size.
func bounded(s string) string {
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// stringValue is the text of the JSON string raw (raw's own bytes when it
// holds no escape, else unescaped into *buf), and false when raw is not a
// string.
func stringValue(raw []byte, buf *[]byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner, true
	}
	// encoding/json also makes invalid UTF-8 into U+FFFD, as the checksum
	// of the server's strings expects.
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	*buf = append((*buf)[:0], s...)
	return *buf, true
}

// appendString appends e as encoding/json encodes a string. Entries are
// nearly always printable ASCII with nothing to escape, copied as they are.
func appendString(dst, e []byte) []byte {
	for _, c := range e {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(string(e))
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, e...)
	return append(dst, '"')
}
