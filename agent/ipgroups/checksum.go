// Package ipgroups keeps the WAF IP-group snapshot the OpenResty Lua runtime
// reads (PROTOCOL 7, DATAPLANE 3): waf_ip_groups.json plus its .checksum
// file in runtime_config_dir. Groups land without an nginx reload: the Lua
// coordinator polls the checksum file and re-reads the JSON when it changes.
package ipgroups

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/openflare/openflare-agent/agent/protocol"
)

// checksumInput is the exact object PROTOCOL 7.1 hashes: these three keys in
// this order. name and type are deliberately not covered.
type checksumInput struct {
	ID      uint64   `json:"id"`
	Enabled bool     `json:"enabled"`
	IPList  []string `json:"ip_list"`
}

// Checksum is PROTOCOL 7.1: lowercase hex SHA-256 of the compact JSON
// {"id":N,"enabled":B,"ip_list":[entries sorted byte-wise]} with Go string
// escaping; a null list is hashed as [].
func Checksum(g protocol.WAFIPGroup) string {
	list := g.IPList
	// Server lists are often already sorted; cloning and sorting 100 000
	// entries is the dominant cost, so skip it when it would change nothing.
	if !slices.IsSorted(list) {
		list = slices.Clone(list)
		slices.Sort(list)
	}
	if list == nil {
		list = []string{}
	}
	// A uint64, a bool and strings always encode: the error cannot happen.
	b, _ := json.Marshal(checksumInput{ID: g.ID, Enabled: g.Enabled, IPList: list})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// verifiedGroup is a pushed or returned group whose checksum was recomputed
// and matched, encoded as it is stored in the snapshot.
type verifiedGroup struct {
	id       uint64
	checksum string
	raw      json.RawMessage
}

// verify recomputes g's checksum and, when it matches the one the server
// sent, encodes g for the snapshot. The returned string is the rejection
// reason when it does not match.
func verify(g protocol.WAFIPGroup) (verifiedGroup, string, error) {
	if got := Checksum(g); got != g.Checksum {
		return verifiedGroup{}, fmt.Sprintf("checksum mismatch: server sent %q, content hashes to %s", g.Checksum, got), nil
	}
	// The server may send ip_list null (PROTOCOL 7.1). Store [] instead: the
	// checksum is the same and the Lua side then always finds a table.
	if g.IPList == nil {
		g.IPList = []string{}
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return verifiedGroup{}, "", fmt.Errorf("ip groups: encode group %d: %w", g.ID, err)
	}
	return verifiedGroup{id: g.ID, checksum: g.Checksum, raw: raw}, "", nil
}
