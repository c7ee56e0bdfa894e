-- IP groups for ip_match nodes: a snapshot refresher shared by all workers,
-- and a worker-local matcher over the adopted snapshot (waf/ranges.lua).
--
-- The agent writes waf_ip_groups.json, then its compiled form
-- waf_ip_groups.bin (each group as sorted, merged address ranges, labelled
-- with the checksum of the JSON it came from), then the .checksum file,
-- which names the version to adopt. Workers never read the JSON: decoding
-- it into Lua tables cost about 100 bytes of heap per entry in every
-- worker.

local ffi = require("ffi")
local ranges = require("waf.ranges")

local ipairs = ipairs
local tonumber = tonumber
local tostring = tostring

local RUNTIME_DIR = "__OPENFLARE_RUNTIME_CONFIG_DIR__"
local MAX_SNAPSHOT_BYTES = tonumber("__OPENFLARE_WAF_IP_GROUPS_MAX_SNAPSHOT_BYTES__")
-- Keys of the format that published the JSON itself: removed once, so an
-- upgrade by HUP (the dict survives it) does not keep up to 40 MB of it.
local LEGACY_PREFIX = "ip_groups_raw:"
local LEGACY_PREVIOUS_KEY = "ip_groups_previous_version"

local legacy_cleaned = false

-- The snapshot's key for a record's id, as the JSON spells it
-- (tostring(id) of a config id finds it): exact decimal, also beyond 2^53.
local function id_key(w, r)
    local lo, hi = w[r], w[r + 1]
    if hi == 0 then
        return tostring(lo)
    end
    local v = ffi.new("uint64_t", hi) * 4294967296ULL + lo
    return tostring(v):match("^%d+")
end

local function remove_legacy_keys(dict)
    if legacy_cleaned then
        return
    end
    legacy_cleaned = true
    dict:delete(LEGACY_PREVIOUS_KEY)
    for _, k in ipairs(dict:get_keys(1024)) do
        if k:sub(1, #LEGACY_PREFIX) == LEGACY_PREFIX then
            dict:delete(k)
        end
    end
end

return ranges.new({
    what = "IP group",
    path = RUNTIME_DIR .. "/waf_ip_groups.bin",
    checksum_path = RUNTIME_DIR .. "/waf_ip_groups.json.checksum",
    magic = "OFIPGBIN",
    -- Every JSON snapshot within its limit compiles within this one (the
    -- agent uses the same bound): an IPv6 entry of 5 JSON bytes becomes 32.
    max_bytes = 7 * MAX_SNAPSHOT_BYTES,
    version_key = "ip_groups_version",
    lock_key = "ip_groups_refresh_lock",
    key = id_key,
    before_refresh = remove_legacy_keys,
})
