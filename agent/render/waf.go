package render

import (
	"encoding/json"
	"fmt"
	"sort"
)

// wafDocument is the `waf` object. It is re-serialised with encoding/json as
// waf_config.json, so the field order and omitempty rules below are part of
// the checksum contract (PROTOCOL 4.3): they reproduce the server's bytes.
type wafDocument struct {
	RuleGroups []wafRuleGroup `json:"rule_groups"`
	IPGroups   []wafIPGroup   `json:"ip_groups,omitempty"`
	Bindings   []wafBinding   `json:"bindings"`
}

// wafRuleGroup keeps the legacy flattened keys (DATAPLANE 2.9) between
// is_global and graph; only block_status_code is emitted when zero.
type wafRuleGroup struct {
	ID                  uint64          `json:"id"`
	Name                string          `json:"name"`
	Enabled             bool            `json:"enabled"`
	IsGlobal            bool            `json:"is_global"`
	BlockStatusCode     int64           `json:"block_status_code"`
	BlockResponseBody   string          `json:"block_response_body,omitempty"`
	IPWhitelist         []string        `json:"ip_whitelist,omitempty"`
	IPBlacklist         []string        `json:"ip_blacklist,omitempty"`
	IPWhitelistGroupIDs []uint64        `json:"ip_whitelist_group_ids,omitempty"`
	IPBlacklistGroupIDs []uint64        `json:"ip_blacklist_group_ids,omitempty"`
	CountryWhitelist    []string        `json:"country_whitelist,omitempty"`
	CountryBlacklist    []string        `json:"country_blacklist,omitempty"`
	RegionWhitelist     []string        `json:"region_whitelist,omitempty"`
	RegionBlacklist     []string        `json:"region_blacklist,omitempty"`
	PowEnabled          bool            `json:"pow_enabled,omitempty"`
	PowConfig           json.RawMessage `json:"pow_config,omitempty"`
	Graph               wafGraph        `json:"graph"`
}

type wafGraph struct {
	Entry string             `json:"entry"`
	Nodes map[string]wafNode `json:"nodes"`
}

// wafNode keeps config as raw JSON: encoding/json compacts it (and escapes
// <, >, &) but keeps its key order, as the server does.
type wafNode struct {
	Type   string            `json:"type"`
	Config json.RawMessage   `json:"config,omitempty"`
	Next   map[string]string `json:"next,omitempty"`
}

type wafIPGroup struct {
	ID      uint64   `json:"id"`
	Name    string   `json:"name"`
	Type    string   `json:"type"`
	Enabled bool     `json:"enabled"`
	IPList  []string `json:"ip_list,omitempty"`
}

type wafBinding struct {
	RouteID      uint64   `json:"route_id"`
	SiteName     string   `json:"site_name"`
	RuleGroupIDs []uint64 `json:"rule_group_ids"`
}

// powRoutes answers "PoW on?" (PROTOCOL 5.2) for every route at once: a
// global enabled group with a pow node turns it on everywhere; otherwise a
// route needs a binding (by route id) to such a group.
type powRoutes struct {
	all    bool
	routes map[uint64]bool
}

func newPowRoutes(doc *wafDocument) powRoutes {
	withPow := make(map[uint64]bool)
	var p powRoutes
	for i := range doc.RuleGroups {
		g := &doc.RuleGroups[i]
		if !g.Enabled || !g.Graph.hasNodeType("pow") {
			continue
		}
		if g.IsGlobal {
			p.all = true
		}
		withPow[g.ID] = true
	}
	if p.all || len(withPow) == 0 {
		return p
	}
	p.routes = make(map[uint64]bool)
	for _, b := range doc.Bindings {
		for _, id := range b.RuleGroupIDs {
			if withPow[id] {
				p.routes[b.RouteID] = true
				break
			}
		}
	}
	return p
}

func (p powRoutes) on(routeID uint64) bool { return p.all || p.routes[routeID] }

func (g *wafGraph) hasNodeType(t string) bool {
	for _, n := range g.Nodes {
		if n.Type == t {
			return true
		}
	}
	return false
}

// ipGroupIDs lists every IP group the document references: ip_match
// nodes' config.ip_group_ids plus the legacy rule-group keys
// ip_whitelist_group_ids / ip_blacklist_group_ids (PROTOCOL 4.2, 7.2),
// deduplicated and ascending.
func (doc *wafDocument) ipGroupIDs() ([]uint64, error) {
	seen := make(map[uint64]bool)
	for _, g := range doc.RuleGroups {
		for _, id := range g.IPWhitelistGroupIDs {
			seen[id] = true
		}
		for _, id := range g.IPBlacklistGroupIDs {
			seen[id] = true
		}
		// Sorted so that, of several broken nodes, the same one is reported.
		nodeIDs := make([]string, 0, len(g.Graph.Nodes))
		for nodeID := range g.Graph.Nodes {
			nodeIDs = append(nodeIDs, nodeID)
		}
		sort.Strings(nodeIDs)
		for _, nodeID := range nodeIDs {
			n := g.Graph.Nodes[nodeID]
			if n.Type != "ip_match" || len(n.Config) == 0 {
				continue
			}
			var cfg struct {
				IPGroupIDs []uint64 `json:"ip_group_ids"`
			}
			if err := json.Unmarshal(n.Config, &cfg); err != nil {
				return nil, fmt.Errorf("rule group %d node %q: decode ip_match config: %w", g.ID, nodeID, err)
			}
			for _, id := range cfg.IPGroupIDs {
				seen[id] = true
			}
		}
	}
	return sortedIDs(seen), nil
}

func sortedIDs(set map[uint64]bool) []uint64 {
	ids := make([]uint64, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
