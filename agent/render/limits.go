package render

import (
	"math"
	"strconv"
	"strings"
)

// limits are a route's effective limits (PROTOCOL 5.2); zero values mean
// "not emitted".
type limits struct {
	connPerServer int64
	connPerIP     int64
	rate          string
	reqPerIP      string
}

func effectiveLimits(r *route, c *restyConfig) limits {
	return limits{
		connPerServer: effectiveCount(r.LimitConnPerServer, c.DefaultLimitConnPerServer),
		connPerIP:     effectiveCount(r.LimitConnPerIP, c.DefaultLimitConnPerIP),
		rate:          effectiveRate(r.LimitRate, c.DefaultLimitRate),
		reqPerIP:      effectiveRate(r.LimitReqPerIP, c.DefaultLimitReqPerIP),
	}
}

// effectiveCount: a positive route value wins, -1 (any negative) disables,
// 0 inherits the default, which itself only counts when positive.
func effectiveCount(v, def int64) int64 {
	switch {
	case v > 0:
		return v
	case v < 0:
		return 0
	case def > 0:
		return def
	}
	return 0
}

// effectiveRate: like effectiveCount with "-1" disabling and ""/"0"
// inheriting; rates are lower-cased so `10R/S` and `10r/s` share a zone.
func effectiveRate(v, def string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	switch v {
	case "-1":
		return ""
	case "", "0":
		def = strings.ToLower(strings.TrimSpace(def))
		if def == "-1" || def == "0" {
			return ""
		}
		return def
	}
	return v
}

// limitZone names the limit_req zone of a rate: `10r/s` → openflare_req_10rs.
func limitZone(rate string) string {
	return "openflare_req_" + strings.ReplaceAll(strings.ToLower(rate), "/", "")
}

// limitBurst is the burst for a rate: Nr/s → 2N, Nr/m → max(⌊N/5⌋, 5),
// anything else (another unit, junk, overflow) → 5.
func limitBurst(rate string) int64 {
	const fallback = 5
	var unit byte
	switch {
	case strings.HasSuffix(rate, "r/s"):
		unit = 's'
	case strings.HasSuffix(rate, "r/m"):
		unit = 'm'
	default:
		return fallback
	}
	digits := rate[:len(rate)-3]
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return fallback
	}
	// 64-bit on every architecture: the server computes this in 64 bits,
	// and a 32-bit int would turn a large rate into a different burst.
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return fallback
	}
	if unit == 's' {
		if n > math.MaxInt64/2 {
			return fallback
		}
		return 2 * n
	}
	return max(n/5, fallback)
}

// writeLimits emits the limit directives of a location (indent: 8 spaces).
func writeLimits(b *strings.Builder, l limits) {
	if l.connPerServer > 0 {
		writeLines(b, "        limit_conn openflare_conn_per_server ", strconv.FormatInt(l.connPerServer, 10), ";\n")
	}
	if l.connPerIP > 0 {
		writeLines(b, "        limit_conn openflare_conn_per_ip ", strconv.FormatInt(l.connPerIP, 10), ";\n")
	}
	if l.rate != "" {
		writeLines(b, "        limit_rate ", l.rate, ";\n")
	}
	if l.reqPerIP != "" {
		writeLines(b, "        limit_req zone=", limitZone(l.reqPerIP), " burst=", strconv.FormatInt(limitBurst(l.reqPerIP), 10), " nodelay;\n",
			"        limit_req_status 429;\n")
	}
}
