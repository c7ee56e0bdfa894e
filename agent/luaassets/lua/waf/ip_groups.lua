-- IP groups for ip_match nodes: a snapshot refresher shared by all workers,
-- and a worker-local matcher over the adopted snapshot.
--
-- The agent writes waf_ip_groups.json first and then its .checksum file.
-- Every worker ticks at start-up and every second. On each tick one worker
-- at most (the holder of a short lock in the shared dict) reads the small
-- checksum file (and the snapshot only when that changed) and
-- publishes the raw JSON under its checksum; then every worker adopts the
-- published version by decoding it into its own Lua table. Requests only
-- read that table: no file I/O and no JSON parsing on the request path.

local cjson = require("cjson.safe")
local ipmatch = require("waf.ipmatch")

local ngx = ngx
local io_open = io.open
local ipairs = ipairs
local pairs = pairs
local pcall = pcall
local setmetatable = setmetatable
local tonumber = tonumber
local tostring = tostring
local type = type

local _M = {}

local DICT_NAME = "openflare_waf_ip_groups"
local SNAPSHOT_PATH = "__OPENFLARE_RUNTIME_CONFIG_DIR__/waf_ip_groups.json"
local CHECKSUM_PATH = SNAPSHOT_PATH .. ".checksum"
local MAX_SNAPSHOT_BYTES = tonumber("__OPENFLARE_WAF_IP_GROUPS_MAX_SNAPSHOT_BYTES__")
-- One tick a second keeps a pushed group live within about two seconds on
-- every worker; a tick costs one read of a 65-byte file by one worker.
local TICK_SECONDS = 1
local LOCK_KEY = "ip_groups_refresh_lock"
local LOCK_SECONDS = 0.9
local VERSION_KEY = "ip_groups_version"
local PREVIOUS_KEY = "ip_groups_previous_version"
local RAW_PREFIX = "ip_groups_raw:"

-- The adopted snapshot. Until a snapshot is published every group reference
-- is unknown, so it never matches (deny lists fail open, as specified).
local adopted_version
local groups = {}

-- Compiled matchers per group object. A new snapshot brings new group
-- tables, so stale matchers simply become garbage.
local matchers = setmetatable({}, { __mode = "k" })

local started = false

-- The checksum label of a snapshot this worker could not use: it is not
-- read again (nor warned about every tick) until the label changes.
local rejected

local function read_file(path)
    local f, err = io_open(path, "rb")
    if not f then
        return nil, err
    end
    local data, rerr = f:read("*a")
    f:close()
    return data, rerr
end

-- Reads at most limit bytes; a larger file is refused before it is read.
local function read_limited(path, limit)
    local f, err = io_open(path, "rb")
    if not f then
        return nil, err
    end
    local size = f:seek("end")
    if not size or size > limit then
        f:close()
        return nil, "size " .. tostring(size) .. " exceeds the maximum of " .. limit .. " bytes"
    end
    f:seek("set")
    local data, rerr = f:read("*a")
    f:close()
    return data, rerr
end

local function enabled(v)
    return v ~= nil and v ~= false and v ~= cjson.null
end

local function decode_snapshot(raw)
    local doc = cjson.decode(raw)
    if type(doc) ~= "table" or type(doc.groups) ~= "table" then
        return nil
    end
    return doc
end

-- Publishes a new snapshot from disk if the checksum file names a version
-- the dict does not hold yet. Only the lock holder gets here.
local function refresh(dict)
    local label = read_file(CHECKSUM_PATH)
    if not label then
        return
    end
    local checksum = label:match("^%s*(.-)%s*$")
    local current = dict:get(VERSION_KEY)
    if checksum == "" or checksum == current or checksum == rejected then
        return
    end

    local raw, err = read_limited(SNAPSHOT_PATH, MAX_SNAPSHOT_BYTES)
    if not raw then
        ngx.log(ngx.WARN, "openflare waf: cannot read IP group snapshot ", SNAPSHOT_PATH, ": ", err)
        rejected = checksum
        return
    end
    if not decode_snapshot(raw) then
        rejected = checksum
        return
    end

    local raw_key = RAW_PREFIX .. checksum
    local existing = dict:get(raw_key)
    if existing == nil then
        local ok, serr = dict:safe_set(raw_key, raw)
        if not ok then
            ngx.log(ngx.WARN, "openflare waf: cannot publish IP group snapshot ", checksum, ": ", serr)
            return
        end
    elseif existing ~= raw then
        -- The file changed again after its checksum was written; the next
        -- checksum file will name the new bytes.
        return
    end

    local ok, verr = dict:safe_set(VERSION_KEY, checksum)
    if not ok then
        ngx.log(ngx.WARN, "openflare waf: cannot publish IP group version ", checksum, ": ", verr)
        dict:delete(raw_key)
        return
    end

    -- Keep current + previous only.
    local previous = dict:get(PREVIOUS_KEY)
    if current then
        dict:safe_set(PREVIOUS_KEY, current)
    end
    if previous and previous ~= checksum and previous ~= current then
        dict:delete(RAW_PREFIX .. previous)
    end
end

-- Swaps in the published snapshot when this worker has another version.
local function adopt(dict)
    local version = dict:get(VERSION_KEY)
    if not version or version == adopted_version then
        return
    end
    local raw = dict:get(RAW_PREFIX .. version)
    if not raw then
        return
    end
    local doc = decode_snapshot(raw)
    if not doc then
        ngx.log(ngx.WARN, "openflare waf: published IP group snapshot ", version, " does not decode")
        return
    end
    -- Compile here, in the timer, so no request pays for a large group.
    for _, group in pairs(doc.groups) do
        if type(group) == "table" and enabled(group.enabled) then
            matchers[group] = ipmatch.compile(group.ip_list)
        end
    end
    groups = doc.groups
    adopted_version = version
    ngx.log(ngx.NOTICE, "openflare waf: adopted IP group snapshot ", version)
end

local function tick(premature)
    if premature then
        return
    end
    local dict = ngx.shared[DICT_NAME]
    if dict:safe_add(LOCK_KEY, true, LOCK_SECONDS) then
        local ok, err = pcall(refresh, dict)
        if not ok then
            ngx.log(ngx.ERR, "openflare waf: IP group refresh failed: ", err)
        end
    end
    local ok, err = pcall(adopt, dict)
    if not ok then
        ngx.log(ngx.ERR, "openflare waf: IP group adoption failed: ", err)
    end
end

-- Starts the refresher in this worker (once). Returns true, or nil and an
-- error when the shared dict or the timer is unavailable.
function _M.start()
    if started then
        return true
    end
    if not ngx.shared[DICT_NAME] then
        return nil, "lua_shared_dict " .. DICT_NAME .. " is not declared"
    end
    local ok, err = ngx.timer.every(TICK_SECONDS, tick)
    if not ok then
        return nil, "cannot start the IP group refresher: " .. tostring(err)
    end
    started = true
    -- The first tick runs now, so a fresh worker serves its first request
    -- with the snapshot already published by its predecessors.
    tick(false)
    return true
end

-- Reports whether the candidate address (ipmatch.parse) belongs to the group
-- with this id in the adopted snapshot. Missing or disabled groups never match.
local function group_match(id, cand)
    local group = groups[tostring(id)]
    if type(group) ~= "table" or not enabled(group.enabled) then
        return false
    end
    local m = matchers[group]
    if not m then
        m = ipmatch.compile(group.ip_list)
        matchers[group] = m
    end
    return ipmatch.match(m, cand)
end

-- Reports whether the candidate belongs to any group listed in ids (an
-- absent, null or non-list value counts as no groups).
function _M.match(ids, cand)
    if type(ids) ~= "table" then
        return false
    end
    for _, id in ipairs(ids) do
        if group_match(id, cand) then
            return true
        end
    end
    return false
end

return _M
