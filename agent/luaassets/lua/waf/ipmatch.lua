-- IPv4/IPv6 address matcher for ip_match node literals (ips, cidrs).
--
-- A list of entries ("192.0.2.1", "10.0.0.0/8", "2001:db8::/32", ...) is
-- compiled into one hash table per family and prefix length, keyed by the
-- masked network. A lookup therefore costs one probe per distinct prefix
-- length, whatever the size of the list. A plain address is a full-length
-- prefix (/32 or /128). IPv4 and IPv4-mapped IPv6 stay separate families on
-- purpose, and an entry that does not parse never matches anything.
--
-- IP groups are not compiled here: the agent compiles them into
-- waf_ip_groups.bin with a Go port of this entry syntax
-- (agent/ipgroups/entry.go). A change to what parse accepts must be made
-- there too; TestEntrySyntaxMatchesLua compares the two.

local bit = require("bit")

local band = bit.band
local byte = string.byte
local char = string.char
local find = string.find
local sub = string.sub
local floor = math.floor
local ipairs = ipairs
local select = select
local sort = table.sort
local tonumber = tonumber
local type = type
local unpack = unpack

local _M = {}

-- POW2[k] = 2^k; IPv4 addresses are plain numbers in [0, 2^32), so masking
-- to a prefix is exact floating-point arithmetic and never hits the sign
-- bit of LuaJIT's 32-bit bit operations.
local POW2 = {}
for k = 0, 32 do
    POW2[k] = 2 ^ k
end

-- HIGH_BITS[r] keeps the r most significant bits of a byte.
local HIGH_BITS = {}
for r = 0, 8 do
    HIGH_BITS[r] = 256 - 2 ^ (8 - r)
end

-- Parses a dotted quad in s[i..j]. Leading zeros are rejected, as Go's
-- parser (which validated the entry on the server) rejects them.
local function parse_v4(s, i, j)
    local n, dots, octet, digits = 0, 0, 0, 0
    for k = i, j do
        local c = byte(s, k)
        if c == 46 then -- "."
            if digits == 0 or dots == 3 then
                return nil
            end
            n = n * 256 + octet
            dots, octet, digits = dots + 1, 0, 0
        elseif c >= 48 and c <= 57 then
            if digits > 0 and octet == 0 then
                return nil
            end
            octet = octet * 10 + c - 48
            digits = digits + 1
            if octet > 255 then
                return nil
            end
        else
            return nil
        end
    end
    if dots ~= 3 or digits == 0 then
        return nil
    end
    return n * 256 + octet
end

local function hex_value(c)
    if c >= 48 and c <= 57 then
        return c - 48
    end
    if c >= 97 and c <= 102 then
        return c - 87
    end
    if c >= 65 and c <= 70 then
        return c - 55
    end
    return nil
end

-- Appends to out the 16-bit groups of a colon-separated run such as
-- "2001:db8" (one side of a "::"). When tail_v4 is set, the last piece may
-- be a dotted quad, which stands for two groups. Returns false on bad input.
local function parse_groups(s, out, tail_v4)
    if s == "" then
        return true
    end
    local start, len = 1, #s
    while true do
        local colon = find(s, ":", start, true)
        local stop = colon and colon - 1 or len
        if not colon and tail_v4 and find(s, ".", start, true) then
            local v4 = parse_v4(s, start, len)
            if not v4 then
                return false
            end
            out[#out + 1] = floor(v4 / 65536)
            out[#out + 1] = v4 % 65536
            return true
        end
        if stop < start or stop - start > 3 then
            return false
        end
        local v = 0
        for k = start, stop do
            local h = hex_value(byte(s, k))
            if not h then
                return false
            end
            v = v * 16 + h
        end
        out[#out + 1] = v
        if not colon then
            return true
        end
        start = colon + 1
    end
end

-- Parses an IPv6 address into its 16 bytes, or returns nil.
local function parse_v6(s)
    local head, tail = {}, {}
    local gap = find(s, "::", 1, true)
    if gap then
        if find(s, "::", gap + 1, true) then
            return nil
        end
        if not parse_groups(sub(s, 1, gap - 1), head, false)
            or not parse_groups(sub(s, gap + 2), tail, true)
            or #head + #tail > 7 then
            return nil
        end
    elseif not parse_groups(s, head, true) or #head ~= 8 then
        return nil
    end
    local groups = head
    for _ = 1, 8 - #head - #tail do
        groups[#groups + 1] = 0
    end
    for _, g in ipairs(tail) do
        groups[#groups + 1] = g
    end
    local bytes = {}
    for k, g in ipairs(groups) do
        bytes[2 * k - 1] = floor(g / 256)
        bytes[2 * k] = g % 256
    end
    return bytes
end

-- The hash key of an IPv6 address truncated to a prefix: the first
-- ceil(plen/8) bytes, host bits of the last one cleared.
local function v6_key(bytes, plen)
    local full = floor(plen / 8)
    local rest = plen % 8
    local key = char(unpack(bytes, 1, full))
    if rest > 0 then
        key = key .. char(band(bytes[full + 1], HIGH_BITS[rest]))
    end
    return key
end

local function v4_key(n, plen)
    return n - n % POW2[32 - plen]
end

-- Parses a prefix length: decimal without leading zeros, at most max.
local function parse_plen(s, max)
    if not find(s, "^%d+$") or (#s > 1 and byte(s, 1) == 48) then
        return nil
    end
    local n = tonumber(s)
    if n > max then
        return nil
    end
    return n
end

-- Parses an address (no prefix) into a lookup candidate:
-- { v4 = <number> } or { v6 = <16 bytes>, keys = <per-prefix key cache> }.
local function parse(addr)
    if type(addr) ~= "string" or addr == "" then
        return nil
    end
    if find(addr, ":", 1, true) then
        local bytes = parse_v6(addr)
        return bytes and { v6 = bytes, keys = {} } or nil
    end
    local n = parse_v4(addr, 1, #addr)
    return n and { v4 = n } or nil
end

local function new_family()
    return { lens = {}, nets = {} }
end

local function add(family, plen, key)
    local nets = family.nets[plen]
    if not nets then
        nets = {}
        family.nets[plen] = nets
        family.lens[#family.lens + 1] = plen
    end
    nets[key] = true
end

local function add_entry(m, entry)
    local slash = find(entry, "/", 1, true)
    local cand = parse(slash and sub(entry, 1, slash - 1) or entry)
    if not cand then
        return
    end
    local max = cand.v4 and 32 or 128
    local plen = max
    if slash then
        plen = parse_plen(sub(entry, slash + 1), max)
        if not plen then
            return
        end
    end
    if cand.v4 then
        add(m.v4, plen, v4_key(cand.v4, plen))
    else
        add(m.v6, plen, v6_key(cand.v6, plen))
    end
end

local function longest_first(a, b)
    return a > b
end

-- Compiles any number of entry lists (each may be absent, null or not a
-- list, which counts as empty) into one matcher.
function _M.compile(...)
    local m = { v4 = new_family(), v6 = new_family() }
    for i = 1, select("#", ...) do
        local list = select(i, ...)
        if type(list) == "table" then
            for _, entry in ipairs(list) do
                if type(entry) == "string" then
                    add_entry(m, entry)
                end
            end
        end
    end
    sort(m.v4.lens, longest_first)
    sort(m.v6.lens, longest_first)
    return m
end

_M.parse = parse

-- Reports whether the candidate (from parse) falls in any compiled entry.
function _M.match(m, cand)
    if not cand then
        return false
    end
    local n = cand.v4
    if n then
        local family = m.v4
        local lens, nets = family.lens, family.nets
        for i = 1, #lens do
            local plen = lens[i]
            if nets[plen][v4_key(n, plen)] then
                return true
            end
        end
        return false
    end
    local family = m.v6
    local lens, nets, keys = family.lens, family.nets, cand.keys
    for i = 1, #lens do
        local plen = lens[i]
        local key = keys[plen]
        if not key then
            key = v6_key(cand.v6, plen)
            keys[plen] = key
        end
        if nets[plen][key] then
            return true
        end
    end
    return false
end

return _M
