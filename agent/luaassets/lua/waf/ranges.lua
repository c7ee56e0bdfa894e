-- Snapshots of named address-range sets that the agent compiles and the
-- workers match against in place: the IP groups of ip_match nodes
-- (waf/ip_groups.lua) and the country and region networks of geo_match
-- nodes (waf/geo.lua). new() makes one refresher and matcher per file.
--
-- The file (see agent/ipgroups/compile.go and agent/geosnap) holds each set
-- as sorted, merged address ranges, labelled in its header with the version
-- it was compiled from. Every worker ticks at start-up and every second. On
-- each tick one worker at most (the holder of a short lock in the shared
-- dict) learns the version on disk (a small checksum file, or the file's
-- own 88-byte header) and, when it changed and the file carries it,
-- publishes it; a worker's first tick does so whatever the lock. Every worker then adopts the published version by mapping
-- the file read-only (64-bit Linux: all workers share one copy in the page
-- cache, and only the pages a lookup touches count in a worker) or else by
-- reading it into one Lua string. Requests binary-search the ranges in
-- place: no file I/O, no parsing and no per-entry Lua objects.
--
-- The agent replaces a file by rename, never in place, so a mapping stays
-- valid (it holds the old inode) until this worker drops it.

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
-- One tick a second keeps a new snapshot live within about two seconds on
-- every worker; a tick costs one small read by one worker.
local TICK_SECONDS = 1
local LOCK_SECONDS = 0.9
local RETRY_SECONDS = 0.1

-- The header. Integers are uint32 in the host's byte order; offsets are in
-- bytes from the start.
local FORMAT = 1
local BYTE_ORDER_MARK = 0x01020304
local HEADER_BYTES = 88
local LABEL_OFFSET, LABEL_BYTES = 16, 64
local COUNT_WORD = 20
local FLAGS_WORD = 21
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

local function release(blob)
    if blob and blob.addr then
        C.munmap(blob.addr, blob.size)
        blob.addr = nil
    end
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

-- Reports whether the candidate (ipmatch.parse) is in any set of state
-- named by keys (tostring of each element).
local function match_in(st, keys, cand)
    if not st or not cand or type(keys) ~= "table" then
        return false
    end
    local sets = st.sets
    for _, key in ipairs(keys) do
        local s = sets[tostring(key)]
        if s then
            if cand.v4 then
                if s.n4 > 0 and in_v4(s.v4, s.n4, cand.v4) then
                    return true
                end
            elseif s.n6 > 0 then
                local w = v6_words(cand)
                if in_v6(s.v6, s.n6, w[1], w[2], w[3], w[4]) then
                    return true
                end
            end
        end
    end
    return false
end

-- new returns a refresher and matcher for one compiled file. spec:
--   what        what the sets are, for log lines ("IP group")
--   path        the compiled file
--   magic       its 8-byte magic
--   max_bytes   the largest file accepted
--   version_key, lock_key   keys in the shared dict
--   checksum_path  (optional) a file naming the version to publish; without
--                  it the label in the file's own header is the version
--   key(w, r, p)   the set name of the record at word r (w: the words, p:
--                  the bytes)
--   before_refresh(dict)  (optional) runs on the lock holder's ticks
function _M.new(spec)
    local M = {}
    local path, magic, max_bytes = spec.path, spec.magic, spec.max_bytes
    local what = spec.what

    -- The adopted snapshot: { blob = <file bytes>, flags = <header flags>,
    -- sets = { [name] = { n4, v4, n6, v6 } } } with enabled sets only.
    -- Until a snapshot is adopted no set exists, so nothing matches.
    local state
    local adopted_version
    local started = false
    -- Versions already warned about, so a bad file is reported once.
    local warned_publish, warned_adopt
    -- A version whose file is malformed although its label matches: not
    -- loaded again until the version changes.
    local broken_version
    -- The version a lookup last failed to adopt, and when: a lookup tries
    -- again at most every RETRY_SECONDS, not on every request.
    local failed_version, failed_at = nil, 0

    local function too_large(size)
        return "size " .. tostring(size) .. " exceeds the maximum of " .. max_bytes .. " bytes"
    end

    -- Returns the label of the file whose first bytes are at p, or nil
    -- and why not.
    local function header_label(p, size)
        if size < HEADER_BYTES then
            return nil, "is shorter than its header"
        end
        local w = ffi_cast(U32P, p)
        if ffi_string(p, #magic) ~= magic or w[2] ~= FORMAT or w[3] ~= BYTE_ORDER_MARK then
            return nil, "is not a compiled " .. what .. " snapshot of format " .. FORMAT
        end
        return ffi_string(p + LABEL_OFFSET, LABEL_BYTES)
    end

    -- Reads the first n bytes of the file (all of it when n is nil),
    -- refusing a file over max_bytes.
    local function read_start(n)
        local f, err = io_open(path, "rb")
        if not f then
            return nil, err
        end
        local size = f:seek("end")
        if not size or size > max_bytes then
            f:close()
            return nil, path .. " " .. too_large(size)
        end
        f:seek("set")
        local data, rerr = f:read(n or "*a")
        f:close()
        if not data and not n then
            return nil, "cannot read " .. path .. ": " .. tostring(rerr)
        end
        return data or ""
    end

    -- The label of the file on disk, from its header alone.
    local function file_label()
        local head, err = read_start(HEADER_BYTES)
        if not head then
            return nil, err
        end
        return header_label(ffi_cast(U8P, head), #head)
    end

    -- Blobs: { ptr, size } plus what keeps the bytes alive (addr for a
    -- mapping, str for a string).
    local function map_blob()
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
        if size > max_bytes or size < HEADER_BYTES then
            C.close(fd)
            return nil, path .. (size < HEADER_BYTES and " is shorter than its header" or " " .. too_large(size))
        end
        local addr = C.mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
        local err = errno_text()
        C.close(fd)
        if ffi_cast("intptr_t", addr) == -1 then
            return nil, "cannot map " .. path .. ": " .. err
        end
        -- A binary search touches a few scattered pages: faults need not
        -- read ahead around them. Advice only; a failure changes nothing.
        pcall(function()
            C.madvise(addr, size, MADV_RANDOM)
        end)
        return { ptr = ffi_cast(U8P, addr), size = size, addr = addr, how = "mapped" }
    end

    local function read_blob()
        local data, err = read_start()
        if not data then
            return nil, err
        end
        return { ptr = ffi_cast(U8P, data), size = #data, str = data, how = "read" }
    end

    -- Indexes the enabled sets of a blob whose label was checked. Every
    -- record is bounds-checked, so a lookup never reads outside the blob.
    local function index(blob)
        local w = ffi_cast(U32P, blob.ptr)
        local size = blob.size
        local count = w[COUNT_WORD]
        if HEADER_BYTES + count * RECORD_WORDS * 4 > size then
            return nil, "records run past the end of the file"
        end
        local sets = {}
        for i = 0, count - 1 do
            local r = FIRST_RECORD_WORD + i * RECORD_WORDS
            if w[r + 2] % 2 == 1 then
                local n4, off4, n6, off6 = w[r + 3], w[r + 4], w[r + 5], w[r + 6]
                local name = spec.key(w, r, blob.ptr)
                if off4 % 4 ~= 0 or off6 % 4 ~= 0 or off4 + n4 * 8 > size or off6 + n6 * 32 > size then
                    return nil, "the ranges of " .. what .. " " .. name .. " run past the end of the file"
                end
                sets[name] = { n4 = n4, v4 = w + off4 / 4, n6 = n6, v6 = w + off6 / 4 }
            end
        end
        return sets
    end

    -- Loads the file if it carries label. how is "map" or "read" (default:
    -- map where possible). Returns the state, or nil, the reason and
    -- whether the file is broken for good (as opposed to newer or
    -- unreadable).
    local function load(label, how)
        if how == nil then
            how = can_map and "map" or "read"
        end
        local blob, err
        if how == "map" then
            blob, err = map_blob()
        else
            blob, err = read_blob()
        end
        if not blob then
            return nil, err, false
        end
        local got, herr = header_label(blob.ptr, blob.size)
        if got ~= label then
            release(blob)
            return nil, path .. " " .. (herr or "is labelled " .. got), false
        end
        local sets, ierr = index(blob)
        if not sets then
            release(blob)
            return nil, path .. ": " .. ierr, true
        end
        return { blob = blob, sets = sets, flags = ffi_cast(U32P, blob.ptr)[FLAGS_WORD] }
    end

    -- The version on disk: the checksum file's content, or the file's own
    -- label.
    local function disk_version()
        if not spec.checksum_path then
            return file_label()
        end
        local text = read_file(spec.checksum_path)
        if not text then
            return nil
        end
        return text:match("^%s*(.-)%s*$")
    end

    -- Publishes a new version if the disk holds one the dict does not hold
    -- yet and the file carries it. Only the lock holder gets here. A file
    -- that does not carry it yet (the agent writes the file before the
    -- checksum file, and repairs it at start) is checked again on the next
    -- tick; it costs one 88-byte read.
    local function refresh(dict)
        if spec.before_refresh then
            spec.before_refresh(dict)
        end
        local version = disk_version()
        if not version or version == "" or version == dict:get(spec.version_key) then
            return
        end
        if spec.checksum_path then
            local label, err = file_label()
            if label ~= version then
                if warned_publish ~= version then
                    warned_publish = version
                    ngx.log(ngx.WARN, "openflare waf: ", what, " snapshot ", version, " not published: ", path, " ",
                        err or "is labelled " .. tostring(label))
                end
                return
            end
        end
        local ok, serr = dict:safe_set(spec.version_key, version)
        if not ok then
            ngx.log(ngx.WARN, "openflare waf: cannot publish ", what, " version ", version, ": ", serr)
        end
    end

    -- Swaps in the published snapshot when this worker has another version.
    local function adopt(dict)
        local version = dict:get(spec.version_key)
        if not version or version == adopted_version or version == broken_version then
            return
        end
        local next_state, err, broken = load(version)
        if not next_state then
            failed_version, failed_at = version, ngx.now()
            if broken then
                broken_version = version
            end
            -- A newer file than the version is normal for a moment: the
            -- lock holder publishes it on its next tick.
            if warned_adopt ~= version and (broken or not err:find(" is labelled ", 1, true)) then
                warned_adopt = version
                ngx.log(ngx.WARN, "openflare waf: cannot adopt ", what, " snapshot ", version, ": ", err)
            end
            return
        end
        local old = state
        state = next_state
        adopted_version = version
        -- No request is inside a lookup now: lookups never yield, and this
        -- runs between them (in the timer, or before a lookup).
        if old then
            release(old.blob)
        end
        ngx.log(ngx.NOTICE, "openflare waf: adopted ", what, " snapshot ", version, " (", next_state.blob.size,
            " bytes, ", next_state.blob.how, ")")
    end

    local function tick(premature, first)
        if premature then
            return
        end
        local dict = ngx.shared[DICT_NAME]
        -- A worker's first tick reads the disk whoever holds the lock: the
        -- agent may have written a new file just before the reload that
        -- started this worker, and its first request must see it.
        if first or dict:safe_add(spec.lock_key, true, LOCK_SECONDS) then
            local ok, err = pcall(refresh, dict)
            if not ok then
                ngx.log(ngx.ERR, "openflare waf: ", what, " refresh failed: ", err)
            end
        end
        local ok, err = pcall(adopt, dict)
        if not ok then
            ngx.log(ngx.ERR, "openflare waf: ", what, " adoption failed: ", err)
        end
    end

    -- Starts the refresher in this worker (once). Returns true, or nil and
    -- an error when the shared dict or the timer is unavailable.
    function M.start()
        if started then
            return true
        end
        if not ngx.shared[DICT_NAME] then
            return nil, "lua_shared_dict " .. DICT_NAME .. " is not declared"
        end
        local ok, err = ngx.timer.every(TICK_SECONDS, tick)
        if not ok then
            return nil, "cannot start the " .. what .. " refresher: " .. tostring(err)
        end
        started = true
        -- The first tick runs now, so a fresh worker serves its first
        -- request with the snapshot already published by its predecessors.
        tick(false, true)
        return true
    end

    -- Publishes the snapshot on disk at once: the agent asks for it on its
    -- self-test socket after it landed one (DATAPLANE 3), so no worker
    -- waits for the lock holder's next tick. Returns the version published,
    -- or nil and why not.
    function M.publish()
        local dict = ngx.shared[DICT_NAME]
        if not dict then
            return nil, "lua_shared_dict " .. DICT_NAME .. " is not declared"
        end
        local ok, err = pcall(refresh, dict)
        if not ok then
            return nil, what .. " refresh failed: " .. tostring(err)
        end
        return dict:get(spec.version_key)
    end

    -- Reports whether the candidate (ipmatch.parse) belongs to any set
    -- named in keys (an absent, null or non-list value names none).
    -- Missing or disabled sets never match. A version published since this
    -- worker's last adoption is adopted first: one shared-dict read per
    -- lookup makes a snapshot the agent announced (publish) live in every
    -- worker at its next request, instead of at its next tick.
    function M.match(keys, cand)
        local dict = ngx.shared[DICT_NAME]
        local version = dict and dict:get(spec.version_key)
        if version and version ~= adopted_version and version ~= broken_version
            and (version ~= failed_version or ngx.now() - failed_at >= RETRY_SECONDS) then
            local ok, err = pcall(adopt, dict)
            if not ok then
                failed_version, failed_at = version, ngx.now()
                ngx.log(ngx.ERR, "openflare waf: ", what, " adoption failed: ", err)
            end
        end
        return match_in(state, keys, cand)
    end

    -- The header flags of the adopted snapshot, or nil before one is
    -- adopted.
    function M.flags()
        return state and state.flags
    end

    -- For tests: load the file on disk (if it carries label) the given
    -- way, "map" or "read", and match against such a state. Releasing a
    -- test state's mapping is left to worker exit.
    M._load = load
    M._match_in = match_in
    M._can_map = can_map
    return M
end

return _M
