-- geo_match: the client's country or region, from networks the agent
-- compiled out of the GeoIP databases (agent/geosnap), matched like IP
-- groups (waf/ranges.lua).
--
-- Neither Debian nor OpenWrt ships resty.maxminddb, so the workers never
-- read a database: the agent walks the City database (and the Country
-- database where City has no data) and writes waf_geo.bin, one range set
-- per country code and region code the active rules name. A replaced
-- database or a changed set of codes becomes a new file, adopted without
-- a reload. Set names are "c" .. country and "r" .. region; a region is
-- "CC-SUB" as DATAPLANE 4 builds it from City data.

local ffi = require("ffi")
local ranges = require("waf.ranges")

local ngx = ngx
local ffi_string = ffi.string
local ipairs = ipairs
local setmetatable = setmetatable
local type = type
local upper = string.upper

local _M = {}

local RUNTIME_DIR = "__OPENFLARE_RUNTIME_CONFIG_DIR__"
-- Set names are at most 8 bytes: the prefix and a code of up to 7.
local MAX_CODE_BYTES = 7
local WARN_DICT = "openflare_waf_config"
local WARN_KEY = "_geo_database_unavailable"
local WARN_SECONDS = 60

-- The set name of a record: its id words hold the name's bytes,
-- zero-padded.
local function code_key(_, r, p)
    return (ffi_string(p + r * 4, 8):gsub("%z+$", ""))
end

local snap = ranges.new({
    what = "geo",
    path = RUNTIME_DIR .. "/waf_geo.bin",
    magic = "OFGEOBIN",
    -- A City database of every country fits in a few MiB of ranges.
    max_bytes = 64 * 1024 * 1024,
    version_key = "geo_version",
    lock_key = "geo_refresh_lock",
    key = code_key,
})

-- Set names per node config, built on first use.
local node_keys = setmetatable({}, { __mode = "k" })

local function add_names(out, list, prefix)
    if type(list) ~= "table" then
        return
    end
    for _, v in ipairs(list) do
        if type(v) == "string" and #v > 0 and #v <= MAX_CODE_BYTES then
            out[#out + 1] = prefix .. upper(v)
        end
    end
end

local function keys_of(config)
    local keys = node_keys[config]
    if not keys then
        keys = {}
        add_names(keys, config.countries, "c")
        add_names(keys, config.regions, "r")
        node_keys[config] = keys
    end
    return keys
end

-- Warns at most once a minute across workers.
local function warn_unavailable(why)
    local dict = ngx.shared[WARN_DICT]
    if not dict or dict:add(WARN_KEY, true, WARN_SECONDS) then
        ngx.log(ngx.WARN, "openflare waf: geo_match takes its false edge: ", why)
    end
end

-- Starts the snapshot refresher in this worker (only workers whose rules
-- have a geo_match node need it).
_M.start = snap.start
_M.publish = snap.publish

-- Reports whether the candidate (ipmatch.parse, or false) is in a country
-- or region the node lists. No snapshot yet, or one compiled without any
-- database, answers false.
function _M.match(config, cand)
    if not cand then
        return false
    end
    local flags = snap.flags()
    if not flags then
        warn_unavailable("no geo snapshot adopted yet (" .. RUNTIME_DIR .. "/waf_geo.bin)")
        return false
    end
    -- Bits 0 and 1: the City and Country databases it was compiled from.
    if flags % 4 == 0 then
        warn_unavailable("no GeoIP database is available (mmdb_path, city_mmdb_path)")
        return false
    end
    return snap.match(keys_of(config), cand)
end

-- For tests.
_M._snap = snap

return _M
