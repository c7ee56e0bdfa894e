package geosnap

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Codes are the country and region codes geo_match nodes name, upper-cased,
// sorted and without repeats.
type Codes struct {
	Countries, Regions []string
}

// maxCode is the longest code kept: a set name is the code behind a
// one-byte prefix in 8 bytes. The server allows 2-letter countries and
// regions of up to 6 characters; waf/geo.lua skips longer entries alike.
const maxCode = 7

// Empty reports whether no code is named.
func (c Codes) Empty() bool { return len(c.Countries) == 0 && len(c.Regions) == 0 }

// Union is every code of c or o.
func (c Codes) Union(o Codes) Codes {
	return Codes{
		Countries: append(slices.Clone(c.Countries), o.Countries...),
		Regions:   append(slices.Clone(c.Regions), o.Regions...),
	}.normal()
}

// Covers reports whether c names every code of o.
func (c Codes) Covers(o Codes) bool {
	for _, x := range o.Countries {
		if _, ok := slices.BinarySearch(c.Countries, x); !ok {
			return false
		}
	}
	for _, x := range o.Regions {
		if _, ok := slices.BinarySearch(c.Regions, x); !ok {
			return false
		}
	}
	return true
}

func (c Codes) String() string {
	return "countries=" + strings.Join(c.Countries, ",") + " regions=" + strings.Join(c.Regions, ",")
}

func (c Codes) normal() Codes {
	slices.Sort(c.Countries)
	slices.Sort(c.Regions)
	return Codes{slices.Compact(c.Countries), slices.Compact(c.Regions)}
}

// upperASCII upper-cases as Lua's string.upper does in the C locale.
func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// CodesOf returns the codes named by the geo_match nodes of a
// waf_config.json. Like the Lua runtime, it takes what it can: lists that
// are absent, null or not arrays name nothing, entries that are not strings
// (or are empty or too long) are skipped. Only a document that is not JSON
// is an error.
func CodesOf(wafConfig []byte) (Codes, error) {
	var doc struct {
		RuleGroups json.RawMessage `json:"rule_groups"`
	}
	if err := json.Unmarshal(wafConfig, &doc); err != nil {
		return Codes{}, fmt.Errorf("geo codes: decode waf config: %w", err)
	}
	var c Codes
	var groups []json.RawMessage
	if json.Unmarshal(doc.RuleGroups, &groups) != nil {
		return c, nil
	}
	for _, raw := range groups {
		// Each group on its own: a malformed one fails closed in the
		// runtime, and must not hide the codes of the others.
		var g struct {
			Graph struct {
				Nodes map[string]json.RawMessage `json:"nodes"`
			} `json:"graph"`
		}
		if json.Unmarshal(raw, &g) != nil {
			continue
		}
		for _, raw := range g.Graph.Nodes {
			var node struct {
				Type   string `json:"type"`
				Config struct {
					Countries json.RawMessage `json:"countries"`
					Regions   json.RawMessage `json:"regions"`
				} `json:"config"`
			}
			if json.Unmarshal(raw, &node) != nil || node.Type != "geo_match" {
				continue
			}
			c.Countries = appendCodes(c.Countries, node.Config.Countries)
			c.Regions = appendCodes(c.Regions, node.Config.Regions)
		}
	}
	return c.normal(), nil
}

func appendCodes(out []string, raw json.RawMessage) []string {
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return out
	}
	for _, v := range list {
		var s string
		if json.Unmarshal(v, &s) == nil && s != "" && len(s) <= maxCode {
			out = append(out, upperASCII(s))
		}
	}
	return out
}
