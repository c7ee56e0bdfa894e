package mmdb

import (
	"bytes"
	"math"
)

// Metadata describes a database; see the "Database Metadata" section of the
// specification.
type Metadata struct {
	DatabaseType             string
	IPVersion                uint
	RecordSize               uint
	NodeCount                uint
	BuildEpoch               uint64
	Languages                []string
	Description              map[string]string
	BinaryFormatMajorVersion uint
	BinaryFormatMinorVersion uint
}

// metadataMarker starts the metadata section; the last occurrence counts,
// because the data section may contain the same bytes.
const metadataMarker = "\xab\xcd\xefMaxMind.com"

// maxMetadataSize is the specification's limit on the metadata section,
// marker included, so the marker is only searched for in that many bytes at
// the end of the file.
const maxMetadataSize = 128 << 10

// parseMetadata decodes the metadata at the end of b and returns it with the
// offset of the marker, which is where the data section ends.
func parseMetadata(b []byte) (Metadata, int, error) {
	tail := b[max(0, len(b)-maxMetadataSize):]
	i := bytes.LastIndex(tail, []byte(metadataMarker))
	if i < 0 {
		return Metadata{}, 0, corrupt("metadata marker not found in the last %d bytes of a %d-byte file", len(tail), len(b))
	}
	markerAt := len(b) - len(tail) + i
	// Pointers inside the metadata are relative to its own start, like those
	// of the data section are to the data section's.
	d := decoder{s: section(b[markerAt+len(metadataMarker):]), build: true, items: maxItems, bytes: maxBytes}
	v, _, err := d.value(0, 0)
	if err != nil {
		return Metadata{}, 0, invalid("metadata", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Metadata{}, 0, corrupt("metadata is a %T, not a map", v)
	}
	var meta Metadata
	var u uint64
	if u, err = metaUint(m, "node_count", math.MaxUint32); err != nil {
		return Metadata{}, 0, err
	}
	meta.NodeCount = uint(u)
	if u, err = metaUint(m, "record_size", math.MaxUint16); err != nil {
		return Metadata{}, 0, err
	}
	meta.RecordSize = uint(u)
	if u, err = metaUint(m, "ip_version", math.MaxUint16); err != nil {
		return Metadata{}, 0, err
	}
	meta.IPVersion = uint(u)
	if u, err = metaUint(m, "binary_format_major_version", math.MaxUint16); err != nil {
		return Metadata{}, 0, err
	}
	meta.BinaryFormatMajorVersion = uint(u)
	if u, err = metaUint(m, "binary_format_minor_version", math.MaxUint16); err != nil {
		return Metadata{}, 0, err
	}
	meta.BinaryFormatMinorVersion = uint(u)
	if meta.BuildEpoch, err = metaUint(m, "build_epoch", math.MaxUint64); err != nil {
		return Metadata{}, 0, err
	}
	dbType, ok := m["database_type"].(string)
	if !ok {
		return Metadata{}, 0, corrupt("metadata: database_type is missing or not a string")
	}
	meta.DatabaseType = dbType
	// languages and description are optional, but must have the right
	// shape when present.
	if v, ok := m["languages"]; ok {
		list, ok := v.([]any)
		if !ok {
			return Metadata{}, 0, corrupt("metadata: languages is a %T, not an array", v)
		}
		meta.Languages = make([]string, 0, len(list))
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return Metadata{}, 0, corrupt("metadata: languages holds a %T, not a string", e)
			}
			meta.Languages = append(meta.Languages, s)
		}
	}
	if v, ok := m["description"]; ok {
		desc, ok := v.(map[string]any)
		if !ok {
			return Metadata{}, 0, corrupt("metadata: description is a %T, not a map", v)
		}
		meta.Description = make(map[string]string, len(desc))
		for lang, e := range desc {
			s, ok := e.(string)
			if !ok {
				return Metadata{}, 0, corrupt("metadata: description[%q] is a %T, not a string", lang, e)
			}
			meta.Description[lang] = s
		}
	}
	return meta, markerAt, nil
}

// metaUint returns the unsigned integer m[key]. Any unsigned integer type is
// accepted, as long as the value fits the field.
func metaUint(m map[string]any, key string, limit uint64) (uint64, error) {
	v, ok := m[key]
	if !ok {
		return 0, corrupt("metadata: %s is missing", key)
	}
	u, ok := v.(uint64)
	if !ok {
		return 0, corrupt("metadata: %s is a %T, not an unsigned integer", key, v)
	}
	if u > limit {
		return 0, corrupt("metadata: %s %d exceeds %d", key, u, limit)
	}
	return u, nil
}
