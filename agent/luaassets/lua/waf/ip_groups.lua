-- IP groups for ip_match nodes: a snapshot refresher shared by all workers,
-- and a worker-local matcher over the adopted snapshot.
--
-- The agent writes waf_ip_groups.json, then its compiled form
-- waf_ip_groups.bin (each group as sorted, merged address ranges, labelled
-- with the checksum of the JSON it came from), then the .checksum file.
-- Workers never read the JSON: decoding it into Lua tables cost about
-- 100 bytes of heap per entry in every worker.
--
-- Every worker ticks at start-up and every second. On each tick one worker
-- at most (the holder of a short lock in the shared dict) reads the small
-- checksum file and, when it changed, the compiled file's header; if the
-- header carries that checksum, it publishes the checksum as the version.
-- Every worker then adopts the published version by mapping the compiled
-- file read-only (64-bit Linux: all workers share one copy in the page
-- cache, and only the pages a lookup touches count in a worker) or else
-- by reading it into one Lua string. Requests binary-search the ranges in
-- place: no file I/O, no parsing and no per-entry Lua objects.
--
-- The agent replaces the file by rename, never in place, so a mapping
-- stays valid (it holds the old inode) until this worker drops it.

local ffi = require("ffi")

local ngx = ngx
local C = ffi.C
local ffi_cast = ffi.cast
local ffi_string = ffi.string
local floor = math.floor
local io_open = io.open
local ipairs = ipairs
local pcall = pcall
local tonumber = tonumber
local tostring = tostring
local type = type

local _M = {}

local DICT_NAME = "openflare_waf_ip_groups"
local RUNTIME_DIR = "__OPENFLARE_RUNTIME_CONFIG_DIR__"
local COMPILED_PATH = RUNTIME_DIR .. "/waf_ip_groups.bin"
local CHECKSUM_PATH = RUNTIME_DIR .. "/waf_ip_groups.json.checksum"
local MAX_SNAPSHOT_BYTES = tonumber("__OPENFLARE_WAF_IP_GROUPS_MAX_SNAPSHOT_BYTES__")
-- Every JSON snapshot within its limit compiles within this one (the agent
-- uses the same bound): an IPv6 entry of 5 JSON bytes becomes 32.
local MAX_COMPILED_BYTES = 7 * MAX_SNAPSHOT_BYTES
-- One tick a second keeps a pushed group live within about two seconds on
-- every worker; a tick costs one read of a 65-byte file by one worker.
local TICK_SECONDS = 1
local LOCK_KEY = "ip_groups_refresh_lock"
local LOCK_SECONDS = 0.9
local VERSION_KEY = "ip_groups_version"
-- Keys of the format that published the JSON itself: removed once, so an
-- upgrade by HUP (the dict survives it) does not keep up to 40 MB of it.
local LEGACY_PREFIX = "ip_groups_raw:"
local LEGACY_PREVIOUS_KEY = "ip_groups_previous_version"

-- The compiled file (see agent/ipgroups/compile.go). Integers are uint32
-- in the host's byte order; offsets are in bytes from the start.
local MAGIC = "OFIPGBIN"
local FORMAT = 1
local BYTE_ORDER_MARK = 0x01020304
local HEADER_BYTES = 88
local LABEL_OFFSET, LABEL_BYTES = 16, 64
local COUNT_WORD = 20
local FIRST_RECORD_WORD = 22
local RECORD_WORDS = 8

local U8P = ffi.typeof("const uint8_t *")
local U32P = ffi.typeof("const uint32_t *")

-- Mapping needs five libc calls. off_t is a long on every 64-bit Linux
-- ABI, glibc or musl, so these declarations are exact there; elsewhere the
-- file is read into a string. Another module may have declared some of
-- them already, which is why each goes on its own.
local can_map = false
if ffi.os == "Linux" and ffi.abi("64bit") then
    for _, decl in ipairs({
        "int open(const char *pathname, int flags, ...);",
        "int close(int fd);",
        "long lseek(int fd, long offset, int whence);",
        "void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset);",
        "int munmap(void *addr, size_t length);",
        "int madvise(void *addr, size_t length, int advice);",
        "char *strerror(int errnum);",
    }) do
        pcall(ffi.cdef, decl)
    end
    can_map = pcall(function()
        return C.open, C.close, C.lseek, C.mmap, C.munmap, C.strerror
    end)
end
local O_RDONLY, SEEK_END, PROT_READ, MAP_SHARED, MADV_RANDOM = 0, 2, 1, 1, 1

-- The adopted snapshot: { blob = <file bytes>, groups = { ["<id>"] =
-- { n4, v4, n6, v6 } } } with enabled groups only. Until a snapshot is
-- adopted every group reference is unknown, so it never matches (deny
-- lists fail open, as specified).
local state
local adopted_version

local started = false

-- Version labels already warned about, so a bad file is reported once.
local warned_publish
local warned_adopt
-- A version whose file is malformed although its label matches: not
-- loaded again until the version changes.
local broken_version
local legacy_cleaned = false

local function errno_text()
    return ffi_string(C.strerror(ffi.errno()))
end

local function read_file(path)
    local f, err = io_open(path, "rb")
    if not f then
        return nil, err
    end
    local data, rerr = f:read("*a")
    f:close()
    return data, rerr
end

local function too_large(size)
    return "size " .. tostring(size) .. " exceeds the maximum of " .. MAX_COMPILED_BYTES .. " bytes"
end

-- Returns the label of the compiled file whose first bytes are at p, or nil
-- and why not.
local function header_label(p, size)
    if size < HEADER_BYTES then
        return nil, "is shorter than its header"
    end
    local w = ffi_cast(U32P, p)
    if ffi_string(p, #MAGIC) ~= MAGIC or w[2] ~= FORMAT or w[3] ~= BYTE_ORDER_MARK then
        return nil, "is not a compiled IP group snapshot of format " .. FORMAT
    end
    return ffi_string(p + LABEL_OFFSET, LABEL_BYTES)
end

-- The label of the compiled file on disk, from its header alone.
local function file_label()
    local f, err = io_open(COMPILED_PATH, "rb")
    if not f then
        return nil, err
    end
    local size = f:seek("end")
    if not size or size > MAX_COMPILED_BYTES then
        f:close()
        return nil, too_large(size)
    end
    f:seek("set")
    local head = f:read(HEADER_BYTES) or ""
    f:close()
    return header_label(ffi_cast(U8P, head), #head)
end

-- Blobs: { ptr, size } plus what keeps the bytes alive (addr for a
-- mapping, str for a string).
local function map_blob(path)
    local fd = C.open(path, O_RDONLY)
    if fd < 0 then
        return nil, "cannot open " .. path .. ": " .. errno_text()
    end
    local size = tonumber(C.lseek(fd, 0, SEEK_END))
    if size < 0 then
        local err = errno_text()
        C.close(fd)
        return nil, "cannot size " .. path .. ": " .. err
    end
    if size > MAX_COMPILED_BYTES or size < HEADER_BYTES then
        C.close(fd)
        return nil, path .. (size < HEADER_BYTES and " is shorter than its header" or " " .. too_large(size))
    end
    local addr = C.mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
    local err = errno_text()
    C.close(fd)
    if ffi_cast("intptr_t", addr) == -1 then
        return nil, "cannot map " .. path .. ": " .. err
    end
    -- A binary search touches a few scattered pages: faults need not read
    -- ahead around them. Advice only; a failure changes nothing.
    pcall(function()
        C.madvise(addr, size, MADV_RANDOM)
    end)
    return { ptr = ffi_cast(U8P, addr), size = size, addr = addr, how = "mapped" }
end

local function read_blob(path)
    local f, err = io_open(path, "rb")
    if not f then
        return nil, err
    end
    local size = f:seek("end")
    if not size or size > MAX_COMPILED_BYTES then
        f:close()
        return nil, path .. " " .. too_large(size)
    end
    f:seek("set")
    local data, rerr = f:read("*a")
    f:close()
    if not data then
        return nil, "cannot read " .. path .. ": " .. tostring(rerr)
    end
    return { ptr = ffi_cast(U8P, data), size = #data, str = data, how = "read" }
end

local function release(blob)
    if blob and blob.addr then
        C.munmap(blob.addr, blob.size)
        blob.addr = nil
    end
end

-- The snapshot's key for an id, as the JSON spells it (tostring(id) of a
-- config id finds it): exact decimal, also beyond 2^53.
local function id_key(lo, hi)
    if hi == 0 then
        return tostring(lo)
    end
    local v = ffi.new("uint64_t", hi) * 4294967296ULL + lo
    return tostring(v):match("^%d+")
end

-- Indexes the enabled groups of a blob whose label was checked. Every
-- record is bounds-checked, so a lookup never reads outside the blob.
local function index(blob)
    local w = ffi_cast(U32P, blob.ptr)
    local size = blob.size
    local count = w[COUNT_WORD]
    if HEADER_BYTES + count * RECORD_WORDS * 4 > size then
        return nil, "group records run past the end of the file"
    end
    local groups = {}
    for i = 0, count - 1 do
        local r = FIRST_RECORD_WORD + i * RECORD_WORDS
        if w[r + 2] % 2 == 1 then
            local n4, off4, n6, off6 = w[r + 3], w[r + 4], w[r + 5], w[r + 6]
            if off4 % 4 ~= 0 or off6 % 4 ~= 0 or off4 + n4 * 8 > size or off6 + n6 * 32 > size then
                return nil, "the ranges of group " .. id_key(w[r], w[r + 1]) .. " run past the end of the file"
            end
            groups[id_key(w[r], w[r + 1])] = { n4 = n4, v4 = w + off4 / 4, n6 = n6, v6 = w + off6 / 4 }
        end
    end
    return groups
end

-- Loads the compiled file if it carries label. how is "map" or "read"
-- (default: map where possible). Returns the state, or nil, the reason and
-- whether the file is broken for good (as opposed to newer or unreadable).
local function load(label, how)
    if how == nil then
        how = can_map and "map" or "read"
    end
    local blob, err
    if how == "map" then
        blob, err = map_blob(COMPILED_PATH)
    else
        blob, err = read_blob(COMPILED_PATH)
    end
    if not blob then
        return nil, err, false
    end
    local got, herr = header_label(blob.ptr, blob.size)
    if got ~= label then
        release(blob)
        return nil, COMPILED_PATH .. " " .. (herr or "is labelled " .. got), false
    end
    local groups, ierr = index(blob)
    if not groups then
        release(blob)
        return nil, COMPILED_PATH .. ": " .. ierr, true
    end
    return { blob = blob, groups = groups }
end

local function remove_legacy_keys(dict)
    legacy_cleaned = true
    dict:delete(LEGACY_PREVIOUS_KEY)
    for _, k in ipairs(dict:get_keys(1024)) do
        if k:sub(1, #LEGACY_PREFIX) == LEGACY_PREFIX then
            dict:delete(k)
        end
    end
end

-- Publishes a new version if the checksum file names one the dict does
-- not hold yet and the compiled file carries it. Only the lock holder gets
-- here. A compiled file that does not carry it yet (the agent writes it
-- before the checksum file, and repairs it at start) is checked again on
-- the next tick; it costs one 88-byte read.
local function refresh(dict)
    if not legacy_cleaned then
        remove_legacy_keys(dict)
    end
    local text = read_file(CHECKSUM_PATH)
    if not text then
        return
    end
    local checksum = text:match("^%s*(.-)%s*$")
    if checksum == "" or checksum == dict:get(VERSION_KEY) then
        return
    end

    local label, err = file_label()
    if label ~= checksum then
        if warned_publish ~= checksum then
            warned_publish = checksum
            ngx.log(ngx.WARN, "openflare waf: IP group snapshot ", checksum, " not published: ", COMPILED_PATH, " ",
                err or "is labelled " .. tostring(label))
        end
        return
    end

    local ok, serr = dict:safe_set(VERSION_KEY, checksum)
    if not ok then
        ngx.log(ngx.WARN, "openflare waf: cannot publish IP group version ", checksum, ": ", serr)
    end
end

-- Swaps in the published snapshot when this worker has another version.
local function adopt(dict)
    local version = dict:get(VERSION_KEY)
    if not version or version == adopted_version or version == broken_version then
        return
    end
    local next_state, err, broken = load(version)
    if not next_state then
        if broken then
            broken_version = version
        end
        -- A newer file than the version is normal for a moment: the lock
        -- holder publishes it on its next tick.
        if warned_adopt ~= version and (broken or not err:find(" is labelled ", 1, true)) then
            warned_adopt = version
            ngx.log(ngx.WARN, "openflare waf: cannot adopt IP group snapshot ", version, ": ", err)
        end
        return
    end
    local old = state
    state = next_state
    adopted_version = version
    -- No request is inside a lookup now: lookups never yield, and this
    -- timer runs between them.
    if old then
        release(old.blob)
    end
    ngx.log(ngx.NOTICE, "openflare waf: adopted IP group snapshot ", version, " (", next_state.blob.size, " bytes, ",
        next_state.blob.how, ")")
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

-- Ranges are disjoint and ascending, so one binary search on the range
-- starts decides membership.
local function in_v4(arr, n, x)
    local lo, hi = 0, n - 1
    while lo <= hi do
        local mid = floor((lo + hi) / 2)
        local k = mid * 2
        if x < arr[k] then
            hi = mid - 1
        elseif x > arr[k + 1] then
            lo = mid + 1
        else
            return true
        end
    end
    return false
end

-- Compares the 128-bit value x1..x4 (most significant first) with the one
-- at arr[k..k+3].
local function cmp6(arr, k, x1, x2, x3, x4)
    local a = arr[k]
    if x1 ~= a then
        return x1 < a and -1 or 1
    end
    a = arr[k + 1]
    if x2 ~= a then
        return x2 < a and -1 or 1
    end
    a = arr[k + 2]
    if x3 ~= a then
        return x3 < a and -1 or 1
    end
    a = arr[k + 3]
    if x4 ~= a then
        return x4 < a and -1 or 1
    end
    return 0
end

local function in_v6(arr, n, x1, x2, x3, x4)
    local lo, hi = 0, n - 1
    while lo <= hi do
        local mid = floor((lo + hi) / 2)
        local k = mid * 8
        if cmp6(arr, k, x1, x2, x3, x4) < 0 then
            hi = mid - 1
        elseif cmp6(arr, k + 4, x1, x2, x3, x4) > 0 then
            lo = mid + 1
        else
            return true
        end
    end
    return false
end

-- The candidate's IPv6 address as four 32-bit words, computed once per
-- candidate.
local function v6_words(cand)
    local w = cand.words
    if not w then
        local b = cand.v6
        w = {
            ((b[1] * 256 + b[2]) * 256 + b[3]) * 256 + b[4],
            ((b[5] * 256 + b[6]) * 256 + b[7]) * 256 + b[8],
            ((b[9] * 256 + b[10]) * 256 + b[11]) * 256 + b[12],
            ((b[13] * 256 + b[14]) * 256 + b[15]) * 256 + b[16],
        }
        cand.words = w
    end
    return w
end

local function match_in(st, ids, cand)
    if not st or not cand or type(ids) ~= "table" then
        return false
    end
    local groups = st.groups
    for _, id in ipairs(ids) do
        local g = groups[tostring(id)]
        if g then
            if cand.v4 then
                if g.n4 > 0 and in_v4(g.v4, g.n4, cand.v4) then
                    return true
                end
            elseif g.n6 > 0 then
                local w = v6_words(cand)
                if in_v6(g.v6, g.n6, w[1], w[2], w[3], w[4]) then
                    return true
                end
            end
        end
    end
    return false
end

-- Reports whether the candidate (ipmatch.parse) belongs to any group listed
-- in ids (an absent, null or non-list value counts as no groups). Missing
-- or disabled groups never match.
function _M.match(ids, cand)
    return match_in(state, ids, cand)
end

-- For tests: load the compiled file on disk (if it carries label) the
-- given way, "map" or "read", and match against such a state. Releasing a
-- test state's mapping is left to worker exit.
_M._load = load
_M._match_in = match_in
_M._can_map = can_map

return _M
