package controlplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"openflare/agent/protocol"
)

// maxIPGroupSnapshot is the largest serialised IP group set the server
// ships (PROTOCOL 7.2).
const maxIPGroupSnapshot = 20 << 20

// Error texts for IP group failures. PROTOCOL.md gives the status (400) but
// not the server's words; agents match on the status.
const (
	msgIPGroupParse    = "WAF IP 组引用解析失败"
	msgIPGroupTooLarge = "WAF IP 组快照超过 20 MiB"
)

// IPGroupChecksum is the PROTOCOL 7.1 checksum of a group as shipped:
// sha256 of the compact JSON {"id","enabled","ip_list"} with the list sorted
// byte-wise and null written as [].
func IPGroupChecksum(g protocol.WAFIPGroup) string {
	sum, _ := ipGroupDigest(g)
	return sum
}

// ipGroupDigest streams the checksum JSON into sha256, one list entry at a
// time (lists can be tens of MiB), and also returns the length of the
// encoded list entries with their commas.
func ipGroupDigest(g protocol.WAFIPGroup) (checksum string, listBytes int) {
	list := slices.Clone(g.IPList)
	slices.Sort(list)
	h := sha256.New()
	fmt.Fprintf(h, `{"id":%d,"enabled":%t,"ip_list":[`, g.ID, g.Enabled)
	for i, entry := range list {
		if i > 0 {
			h.Write([]byte{','})
			listBytes++
		}
		// A string always encodes, exactly as it does inside a []string.
		enc, _ := json.Marshal(entry)
		h.Write(enc)
		listBytes += len(enc)
	}
	h.Write([]byte("]}"))
	return hex.EncodeToString(h.Sum(nil)), listBytes
}

// ipGroup is one stored IP group.
type ipGroup struct {
	shipped protocol.WAFIPGroup // as the server sends it, with the true checksum
	size    int                 // length of shipped's JSON
}

// SetIPGroup creates or replaces an IP group (type defaults to "manual"),
// broadcasts it to every WebSocket as a one-element waf_ip_groups array, and
// returns it as shipped, with its true checksum. A disabled group ships
// with ip_list []; an enabled group with a nil list ships ip_list null.
func (s *Server) SetIPGroup(g protocol.WAFIPGroup) protocol.WAFIPGroup {
	g.IPList = slices.Clone(g.IPList)
	if g.Type == "" {
		g.Type = "manual"
	}
	if !g.Enabled {
		g.IPList = []string{}
	}
	var listBytes int
	g.Checksum, listBytes = ipGroupDigest(g)
	// The shipped JSON's length: the group with an empty list, plus the
	// list's entries. A group of plain strings always encodes.
	base := g
	if len(base.IPList) > 0 {
		base.IPList = []string{}
	}
	b, _ := json.Marshal(base)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[g.ID] = &ipGroup{shipped: g, size: len(b) + listBytes}
	shipped, _ := s.shippedGroupLocked(g.ID)
	s.broadcastLocked(protocol.WSWAFIPGroups, []protocol.WAFIPGroup{shipped})
	s.notifyLocked()
	return g
}

// SetIPGroupChecksumOverride makes the server ship checksum for group id
// instead of the true one (a fault); "" restores the true checksum. The
// server keeps comparing the agent's reports with the true checksum.
func (s *Server) SetIPGroupChecksumOverride(id uint64, checksum string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if checksum == "" {
		delete(s.checksumOverrides, id)
		return
	}
	s.checksumOverrides[id] = checksum
}

// IPGroups returns every group as shipped, by id.
func (s *Server) IPGroups() []protocol.WAFIPGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.WAFIPGroup, 0, len(s.groups))
	for _, id := range sortedKeys(s.groups) {
		g, _ := s.shippedGroupLocked(id)
		out = append(out, g)
	}
	return out
}

// shippedGroupLocked returns group id as the server sends it (checksum
// override applied), and its true checksum.
func (s *Server) shippedGroupLocked(id uint64) (protocol.WAFIPGroup, string) {
	g := s.groups[id].shipped
	real := g.Checksum
	if c, ok := s.checksumOverrides[id]; ok {
		g.Checksum = c
	}
	return g, real
}

// groupEntry is one existing group of a requested set.
type groupEntry struct {
	shipped protocol.WAFIPGroup
	real    string
}

// groupSetLocked returns the existing groups among ids (unknown ids are
// skipped), rejecting the set when its snapshot {"groups":{"<id>":group}}
// would exceed 20 MiB.
func (s *Server) groupSetLocked(ids []uint64) ([]groupEntry, *apiError) {
	var set []groupEntry
	size := len(`{"groups":{}}`)
	for _, id := range ids {
		stored, ok := s.groups[id]
		if !ok {
			continue
		}
		g, real := s.shippedGroupLocked(id)
		set = append(set, groupEntry{g, real})
		size += len(`"":,`) + len(strconv.FormatUint(uint64(id), 10)) + stored.size + len(g.Checksum) - len(real)
	}
	if size > maxIPGroupSnapshot {
		return nil, badRequest(msgIPGroupTooLarge)
	}
	return set, nil
}

// activeGroupIDsLocked are the group ids the active version references.
func (s *Server) activeGroupIDsLocked() ([]uint64, *apiError) {
	if s.active == nil {
		return nil, nil
	}
	if s.active.groupErr != nil {
		return nil, badRequest(msgIPGroupParse)
	}
	return s.active.groupIDs, nil
}

// changedGroupsLocked is the heartbeat's waf_ip_groups: referenced groups
// whose true checksum differs from the reported one (missing = differs).
func (s *Server) changedGroupsLocked(reported map[string]string) ([]protocol.WAFIPGroup, *apiError) {
	ids, aerr := s.activeGroupIDsLocked()
	if aerr != nil {
		return nil, aerr
	}
	set, aerr := s.groupSetLocked(ids)
	if aerr != nil {
		return nil, aerr
	}
	var changed []protocol.WAFIPGroup
	for _, e := range set {
		if reported[strconv.FormatUint(uint64(e.shipped.ID), 10)] != e.real {
			changed = append(changed, e.shipped)
		}
	}
	return changed, nil
}

// handleIPGroupSync is E6 (PROTOCOL 7.2).
func (s *Server) handleIPGroupSync(w http.ResponseWriter, r *http.Request) {
	if s.nodeIDForToken(w, r) == "" {
		return
	}
	var req protocol.IPGroupSyncRequest
	if !bindJSON(w, r, &req) {
		return
	}
	groups, aerr := s.syncGroups(req)
	if aerr != nil {
		writeError(w, aerr.status, aerr.msg)
		return
	}
	writeOK(w, protocol.IPGroupSyncReply{Groups: groups})
}

func (s *Server) syncGroups(req protocol.IPGroupSyncRequest) ([]protocol.WAFIPGroup, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs, aerr := s.activeGroupIDsLocked()
	if aerr != nil {
		return nil, aerr
	}
	want := uniqueSorted(req.IDs)
	if len(want) == 0 {
		want = refs
	}
	if _, aerr := s.groupSetLocked(uniqueSorted(append(slices.Clone(refs), want...))); aerr != nil {
		return nil, aerr
	}
	set, aerr := s.groupSetLocked(want)
	if aerr != nil {
		return nil, aerr
	}
	groups := []protocol.WAFIPGroup{}
	for _, e := range set {
		if req.Checksums[strconv.FormatUint(uint64(e.shipped.ID), 10)] != e.real {
			groups = append(groups, e.shipped)
		}
	}
	return groups, nil
}

// referencedGroupIDs collects the IP group ids a source references: every
// ip_match node's config.ip_group_ids plus the legacy
// ip_whitelist_group_ids / ip_blacklist_group_ids of each rule group. A
// legacy bare route array references none.
func referencedGroupIDs(sourceJSON string) ([]uint64, error) {
	if strings.HasPrefix(strings.TrimSpace(sourceJSON), "[") {
		return nil, nil
	}
	var doc struct {
		WAF struct {
			RuleGroups []struct {
				Graph struct {
					Nodes map[string]struct {
						Type   string          `json:"type"`
						Config json.RawMessage `json:"config"`
					} `json:"nodes"`
				} `json:"graph"`
				Whitelist []uint64 `json:"ip_whitelist_group_ids"`
				Blacklist []uint64 `json:"ip_blacklist_group_ids"`
			} `json:"rule_groups"`
		} `json:"waf"`
	}
	if err := json.Unmarshal([]byte(sourceJSON), &doc); err != nil {
		return nil, fmt.Errorf("controlplane: parse source waf: %w", err)
	}
	var ids []uint64
	for _, rg := range doc.WAF.RuleGroups {
		ids = append(ids, rg.Whitelist...)
		ids = append(ids, rg.Blacklist...)
		for name, n := range rg.Graph.Nodes {
			if n.Type != "ip_match" || len(bytes.TrimSpace(n.Config)) == 0 || string(n.Config) == "null" {
				continue
			}
			var cfg struct {
				IPGroupIDs []uint64 `json:"ip_group_ids"`
			}
			if err := json.Unmarshal(n.Config, &cfg); err != nil {
				return nil, fmt.Errorf("controlplane: parse ip_match node %q: %w", name, err)
			}
			ids = append(ids, cfg.IPGroupIDs...)
		}
	}
	return uniqueSorted(ids), nil
}

func uniqueSorted(ids []uint64) []uint64 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
