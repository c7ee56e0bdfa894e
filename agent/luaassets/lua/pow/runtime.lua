-- Proof-of-work challenge: the shared part of the flow (DATAPLANE 6).
--
-- evaluate(config) runs when the WAF walk reaches a pow node and decides
-- whether the request already holds a session ("next"), or whether the PoW
-- flow takes it over ("takeover": the challenge page is served in place of
-- the requested URL, through an internal redirect to make-challenge).
-- challenge.lua and verify.lua use the helpers below: SHA-256 and random
-- bytes from the libcrypto nginx already links (LuaJIT FFI), sessions and
-- their cookie, the redirect check and the localised strings.
--
-- compile() prepares a pow node's runtime-only whitelist and blacklist; the
-- WAF runtime calls it for every pow node when it loads the rules.
--
-- check() is the access-phase hook that older rendered configs still call;
-- the decision itself is taken inside the graph, so it does nothing.

local ffi = require("ffi")
local cjson = require("cjson.safe")
local ipmatch = require("waf.ipmatch")

local ngx = ngx
local byte = string.byte
local ceil = math.ceil
local find = string.find
local floor = math.floor
local format = string.format
local gmatch = string.gmatch
local ipairs = ipairs
local lower = string.lower
local min = math.min
local pcall = pcall
local re_find = ngx.re.find
local setmetatable = setmetatable
local sub = string.sub
local tonumber = tonumber
local tostring = tostring
local type = type
local unpack = unpack

local _M = {}

_M.API_PREFIX = "/.within.website/x/cmd/anubis/api/"
_M.STATIC_PREFIX = "/.within.website/x/cmd/anubis/static/"
_M.MAKE_CHALLENGE = _M.API_PREFIX .. "make-challenge"
_M.PASS_CHALLENGE = _M.API_PREFIX .. "pass-challenge"
_M.COOKIE = "__openflare_pow"
_M.VERSION = "openflare-pow"

local DEFAULT_DIFFICULTY = 4
local MAX_DIFFICULTY = 16
local DEFAULT_SESSION_TTL = 600
local DEFAULT_CHALLENGE_TTL = 300
-- However often a session is renewed, one solve buys at most a day.
local DEFAULT_SESSION_MAX_LIFETIME = 86400
local CONFIG_KEY_PREFIX = "_request_config:"

-- ---------------------------------------------------------------------------
-- libcrypto through the FFI

pcall(ffi.cdef, [[
unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);
int RAND_bytes(unsigned char *buf, int num);
]])

-- Where SHA256 and RAND_bytes are looked up: first the symbols nginx
-- already has in the process (it links libcrypto for TLS), then the
-- libcrypto sonames of the distributions we ship to.
local DEFAULT_LIBS = { "libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so", "crypto" }

local crypto -- { sha256 = cfunc, rand = cfunc } once found
local crypto_err -- why not, once tried and failed
local lib_list = DEFAULT_LIBS
local use_process = true

local function has_symbols(ns)
    local ok = pcall(function()
        return ns.SHA256 ~= nil and ns.RAND_bytes ~= nil
    end)
    if ok then
        return { sha256 = ns.SHA256, rand = ns.RAND_bytes }
    end
end

local function open_crypto()
    if use_process then
        local found = has_symbols(ffi.C)
        if found then
            return found
        end
    end
    local tried = {}
    for _, name in ipairs(lib_list) do
        local ok, lib = pcall(ffi.load, name)
        if ok then
            local found = has_symbols(lib)
            if found then
                return found
            end
            tried[#tried + 1] = name .. " (no SHA256/RAND_bytes)"
        else
            tried[#tried + 1] = name .. " (" .. tostring(lib) .. ")"
        end
    end
    return nil, "libcrypto SHA256 not available: not in the nginx process, and none of "
        .. table.concat(tried, ", ") .. " could be used"
end

-- Returns true once SHA256 and RAND_bytes are usable, else nil and why.
-- The lookup runs once per worker.
function _M.crypto_ready()
    if crypto then
        return true
    end
    if crypto_err then
        return nil, crypto_err
    end
    local found, err = open_crypto()
    if not found then
        crypto_err = err
        ngx.log(ngx.ERR, "openflare pow: ", err, "; every PoW challenge fails closed")
        return nil, err
    end
    crypto = found
    return true
end

-- Test hook: forget the lookup and search only libs (and the process
-- symbols when with_process is true) on the next use.
function _M._use_crypto_libs(libs, with_process)
    crypto, crypto_err = nil, nil
    lib_list = libs or DEFAULT_LIBS
    use_process = with_process ~= false
end

local HEX = "0123456789abcdef"

local function to_hex(buf, n)
    local out = {}
    for i = 0, n - 1 do
        local b = buf[i]
        local hi = floor(b / 16)
        out[i + 1] = sub(HEX, hi + 1, hi + 1) .. sub(HEX, b - hi * 16 + 1, b - hi * 16 + 1)
    end
    return table.concat(out)
end

-- Lowercase hex SHA-256 of s, or nil and why.
function _M.sha256_hex(s)
    local ok, err = _M.crypto_ready()
    if not ok then
        return nil, err
    end
    local md = ffi.new("unsigned char[32]")
    if crypto.sha256(s, #s, md) == nil then
        return nil, "SHA256 failed"
    end
    return to_hex(md, 32)
end

-- n random bytes from the libcrypto CSPRNG as 2n lowercase hex, or nil and why.
function _M.random_hex(n)
    local ok, err = _M.crypto_ready()
    if not ok then
        return nil, err
    end
    local buf = ffi.new("unsigned char[?]", n)
    if crypto.rand(buf, n) ~= 1 then
        return nil, "RAND_bytes failed"
    end
    return to_hex(buf, n)
end

-- ---------------------------------------------------------------------------
-- Config

local function positive(v, default)
    v = tonumber(v)
    if not v or v ~= v or v < 1 or v == math.huge then
        return default
    end
    return floor(v)
end

-- The true forms security_check accepts; a hand-written config is free text.
local function on(v)
    return v == true or v == 1 or v == "true" or v == "1"
end

-- The node config with defaults applied and the values bounded.
-- session_max_lifetime and bind_client are runtime-only, like the lists:
-- the server's editor emits neither.
function _M.normalise(config)
    if type(config) ~= "table" then
        config = {}
    end
    local difficulty = positive(config.difficulty, DEFAULT_DIFFICULTY)
    if difficulty > MAX_DIFFICULTY then
        difficulty = MAX_DIFFICULTY
    end
    local algorithm = config.algorithm
    if type(algorithm) ~= "string" or algorithm == "" then
        algorithm = "fast"
    end
    return {
        algorithm = algorithm,
        difficulty = difficulty,
        session_ttl = positive(config.session_ttl, DEFAULT_SESSION_TTL),
        challenge_ttl = positive(config.challenge_ttl, DEFAULT_CHALLENGE_TTL),
        session_max_lifetime = positive(config.session_max_lifetime, DEFAULT_SESSION_MAX_LIFETIME),
        bind_client = on(config.bind_client),
    }
end

-- ---------------------------------------------------------------------------
-- Cookie and session

-- A session token is 40 lowercase hex characters; anything else is not
-- looked up.
function _M.valid_token(v)
    return type(v) == "string" and #v == 40 and not find(v, "[^0-9a-f]")
end

-- The first value of a query argument when it is a string (a repeated
-- argument gives a list; a bare one gives true).
function _M.arg(args, name)
    local v = args[name]
    if type(v) == "table" then
        v = v[1]
    end
    if type(v) ~= "string" then
        return nil
    end
    return v
end

local function set_cookie(token, ttl)
    local cookie = _M.COOKIE .. "=" .. token .. "; Path=/; HttpOnly; SameSite=Lax; Max-Age=" .. format("%d", ceil(ttl))
    if ngx.var.scheme == "https" then
        cookie = cookie .. "; Secure"
    end
    ngx.header["Set-Cookie"] = cookie
end

local function mapped_v4(b)
    for i = 1, 10 do
        if b[i] ~= 0 then
            return nil
        end
    end
    if b[11] == 255 and b[12] == 255 then
        return ((b[13] * 256 + b[14]) * 256 + b[15]) * 256 + b[16]
    end
end

-- The network a client address belongs to, as a short string: the /v4_bits
-- of IPv4 (an IPv4-mapped IPv6 address counts as IPv4, since a dual-stack
-- listener shows every IPv4 client that way), the /64 of IPv6, which one
-- host usually holds whole. Anything else (a unix socket) is itself.
function _M.client_net(addr, v4_bits)
    local cand = ipmatch.parse(addr)
    if not cand then
        return tostring(addr)
    end
    local b = cand.v6
    local n = cand.v4 or mapped_v4(b)
    if n then
        return format("%d/%d", n - n % 2 ^ (32 - v4_bits), v4_bits)
    end
    return format("%02x%02x:%02x%02x:%02x%02x:%02x%02x::/64", unpack(b, 1, 8))
end

-- Digests name the host and the client in sessions and challenges: a
-- wildcard server_name lets a client choose a Host as long as its header
-- buffers, and a User-Agent is anything it likes, while entries of the
-- shared dicts must stay small and fixed in size. 128 bits of SHA-256 keep
-- two names from sharing one.
local function digest(s)
    local h, err = _M.sha256_hex(s)
    return h and sub(h, 1, 32), err
end

function _M.host_key(host)
    return digest(host)
end

-- Whom a session was opened for: the /24 (/64) and the User-Agent.
local function client_key()
    return digest(_M.client_net(ngx.var.remote_addr, 24) .. "\n" .. (ngx.var.http_user_agent or ""))
end

-- A session is "<difficulty> <opened> <ends> <host key> <client key>":
-- the difficulty it was earned at, when it was opened and when it ends
-- whatever the renewals (the earning node's maximum lifetime), in
-- ngx.now() seconds. The client is always recorded, so that a node with
-- bind_client can check a session another node opened.
local SESSION = "^(%d+) ([%d.]+) ([%d.]+) (%x+) (%x+)$"

-- Opens a session on the host with host_key for the client of this
-- request and sets its cookie; returns true, or nil and why.
function _M.open_session(token, host_key, difficulty, session_ttl, max_lifetime)
    local sessions = ngx.shared.openflare_pow_sessions
    if not sessions then
        return nil, "lua_shared_dict openflare_pow_sessions is missing"
    end
    local client, err = client_key()
    if not client then
        return nil, err
    end
    local now = ngx.now()
    local ttl = min(session_ttl, max_lifetime)
    local value = format("%d %.3f %.3f %s %s", difficulty, now, now + max_lifetime, host_key, client)
    local ok, serr = sessions:set(token, value, ttl)
    if not ok then
        return nil, "cannot store the session: " .. tostring(serr)
    end
    set_cookie(token, ttl)
    return true
end

-- ---------------------------------------------------------------------------
-- Redirect safety: only a path on this site, or an absolute http(s) URL
-- whose host is $host. Anything else becomes "/".

function _M.safe_redirect(redir, host)
    if type(redir) ~= "string" or redir == "" or #redir > 8192 then
        return "/"
    end
    -- Control characters, spaces and backslashes have no place in a URL we
    -- hand back; browsers read "\" as "/" in some positions.
    if find(redir, "[%c%s\\]") then
        return "/"
    end
    if byte(redir, 1) == 47 then -- "/"
        if byte(redir, 2) == 47 then -- "//host": another site
            return "/"
        end
        return redir
    end
    local scheme, authority, rest = redir:match("^([%a][%w+.-]*)://([^/?#]*)(.*)$")
    if not scheme then
        return "/"
    end
    scheme = lower(scheme)
    if scheme ~= "http" and scheme ~= "https" then
        return "/"
    end
    if find(authority, "@", 1, true) then
        return "/"
    end
    local name = authority:match("^%[[^%]]+%]") or authority:match("^[^:]*")
    local port = sub(authority, #name + 1)
    if port ~= "" and not port:match("^:%d+$") then
        return "/"
    end
    if type(host) ~= "string" or host == "" or lower(name) ~= lower(host) then
        return "/"
    end
    if rest ~= "" and byte(rest, 1) ~= 47 and byte(rest, 1) ~= 63 and byte(rest, 1) ~= 35 then
        return "/"
    end
    return redir
end

-- ---------------------------------------------------------------------------
-- Localisation (DATAPLANE 6.7)

local TEXTS = {
    en = {
        title = "Checking your browser",
        status = "Calculating…",
        notice = "This site is protected against automated traffic. Your browser is solving a small "
            .. "proof-of-work puzzle; you will continue to the page when it is done.",
        why = "Why am I seeing this?",
        why_text = "The site owner asks every visitor's browser to spend a moment of computing time before "
            .. "the first visit. This costs a person almost nothing but makes mass automated requests "
            .. "expensive. A cookie remembers that you passed, so you will not see this page again for a while.",
        noscript = "This check needs JavaScript. Please enable JavaScript and cookies for this site, then reload the page.",
        progress = "Progress",
        busy = "Too many browser checks from your network. Please wait a minute, then reload the page.",
    },
    ["zh-CN"] = {
        title = "正在检查您的浏览器",
        status = "正在计算…",
        notice = "本站已启用自动化流量防护。您的浏览器正在完成一道小型工作量证明计算，完成后将自动进入页面。",
        why = "为什么会看到这个页面？",
        why_text = "站点所有者要求每位访客的浏览器在首次访问前花费少量计算时间。这对真人访客几乎没有影响，"
            .. "却能让大规模自动化请求的成本变高。通过后会用 Cookie 记住结果，一段时间内不会再次出现本页面。",
        noscript = "此检查需要 JavaScript。请为本站启用 JavaScript 和 Cookie，然后刷新页面。",
        progress = "进度",
        busy = "来自您所在网络的浏览器检查过多。请等待一分钟后刷新页面。",
    },
}

-- "zh-CN" when the raw Accept-Language mentions zh anywhere, else "en".
function _M.lang()
    local al = ngx.var.http_accept_language
    if type(al) == "string" and find(al, "zh", 1, true) then
        return "zh-CN"
    end
    return "en"
end

function _M.texts(lang)
    return TEXTS[lang] or TEXTS.en
end

-- ---------------------------------------------------------------------------
-- Runtime-only whitelist / blacklist (DATAPLANE 2.7). The server cannot emit
-- them; hand-written configs may carry them. "paths" is a case-insensitive
-- full match of $uri with "*" as a wildcard.
--
-- The entries come with the rules, from the server or a hand-written file,
-- and are matched on every request that reaches the node: compile()
-- prepares each config's lists once (the WAF runtime calls it when it loads
-- the rules) into matchers whose cost per request is bounded whatever the
-- entries hold:
-- * a glob is its literal pieces, found with plain finds left to right: at
--   worst len(uri) x len(glob) byte comparisons, where a translation into
--   a Lua pattern backtracks exponentially in the number of stars;
-- * a path regex runs under a PCRE match limit of its own, and one that
--   gives up never spares a request the challenge: no hit in a whitelist,
--   a hit in a blacklist;
-- * an entry over MAX_ENTRY_BYTES is left out, and so is every entry of a
--   kind after the first MAX_ENTRIES. A left-out entry is absent: it neither
--   matches nor makes a blacklist non-empty. Each worker logs what it left
--   out once per load of the rules.

-- No path, user-agent fragment or address needs more; it caps the byte
-- comparisons of one entry against a URI.
local MAX_ENTRY_BYTES = 1024
-- A hand-written list is a handful of entries. With 32 of each kind, a list
-- costs a request at most 32 globs (about 4 ms all told for globs built to
-- defeat a plain find, against an 8 KB URI), 32 regex runs that give up at
-- the match limit (about 4.5 ms with PCRE's JIT) and 32 plain finds in the
-- User-Agent, however long the lists are.
local MAX_ENTRIES = 32
-- PCRE counts backtracking steps against it and fails the match past it;
-- its own default, 10 million, lets one regex spend about 30 ms of a
-- request. 100 000 leaves a dozen steps per byte of an 8 KB URI (nginx's
-- default request-line limit) to a regex that does not backtrack
-- exponentially. A limit set in the pattern only lowers the caller's
-- (lua_regex_match_limit), and of two in a pattern the lower one holds, so
-- the entry cannot raise it.
local MATCH_LIMIT = "(*LIMIT_MATCH=100000)"

local function ipv4(s)
    local a, b, c, d = (s or ""):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if not a or a > 255 or b > 255 or c > 255 or d > 255 then
        return nil
    end
    return ((a * 256 + b) * 256 + c) * 256 + d
end

-- An IPv4 CIDR as the network number at its prefix length, or nil when it
-- does not parse (it then still counts as an entry, matching nothing).
local function compile_cidr(cidr)
    local net, bits = cidr:match("^([%d.]+)/(%d+)$")
    local base = ipv4(net)
    bits = tonumber(bits)
    if not base or not bits or bits > 32 then
        return nil
    end
    local size = 2 ^ (32 - bits)
    return { size = size, net = floor(base / size) }
end

-- A glob, lower-cased, as the text before its first star, the text after
-- its last and the non-empty texts between ("**" is "*"); without a star,
-- the text itself.
local function compile_glob(pattern)
    pattern = lower(pattern)
    if not find(pattern, "*", 1, true) then
        return { exact = pattern }
    end
    local pieces = {}
    for piece in gmatch(pattern .. "*", "([^*]*)%*") do
        pieces[#pieces + 1] = piece
    end
    local middle = {}
    for i = 2, #pieces - 1 do
        if pieces[i] ~= "" then
            middle[#middle + 1] = pieces[i]
        end
    end
    return { first = pieces[1], last = pieces[#pieces], middle = middle }
end

-- Whether the lower-cased s matches the compiled glob g. The first and last
-- pieces are pinned to the ends; taking each middle piece at its leftmost
-- place after the previous one leaves the most room for the rest, so one
-- left-to-right pass decides.
local function glob_match(g, s)
    if g.exact then
        return s == g.exact
    end
    local first, last = g.first, g.last
    local n = #s
    if n < #first + #last or sub(s, 1, #first) ~= first or sub(s, n - #last + 1) ~= last then
        return false
    end
    local pos, limit = #first + 1, n - #last
    local middle = g.middle
    for i = 1, #middle do
        local _, e = find(s, middle[i], pos, true)
        if not e or e > limit then
            return false
        end
        pos = e + 1
    end
    return true
end

-- Calls add(value) for each usable string of list (non-empty, as before
-- the caps), named what in ignored when it is over a cap or add refuses it
-- (add returns why). Returns how many add took.
local function add_entries(list, what, ignored, add)
    local kept = 0
    if type(list) ~= "table" then
        return kept
    end
    for i, v in ipairs(list) do
        if type(v) == "string" and v ~= "" then
            local name = what .. "[" .. i .. "]"
            if kept == MAX_ENTRIES then
                ignored[#ignored + 1] = name .. " and later: over the " .. MAX_ENTRIES .. "-entry cap"
                break
            end
            local why = #v > MAX_ENTRY_BYTES and "over the " .. MAX_ENTRY_BYTES .. "-byte cap" or add(v)
            if why then
                ignored[#ignored + 1] = name .. ": " .. why
            else
                kept = kept + 1
            end
        end
    end
    return kept
end

-- One list (whitelist or blacklist) as matchers; n counts its entries.
local function compile_list(spec, name, where, ignored)
    local c = { name = name, where = where, ips = {}, cidrs = {}, globs = {}, regexes = {}, uas = {}, n = 0 }
    if type(spec) ~= "table" then
        return c
    end
    local function kind(key, add)
        c.n = c.n + add_entries(spec[key], name .. "." .. key, ignored, add)
    end
    kind("ips", function(ip)
        c.ips[ip] = true
    end)
    kind("ip_cidrs", function(cidr)
        c.cidrs[#c.cidrs + 1] = compile_cidr(cidr)
    end)
    kind("paths", function(p)
        c.globs[#c.globs + 1] = compile_glob(p)
    end)
    kind("path_regexes", function(re)
        local pattern = MATCH_LIMIT .. re
        -- Compiles and caches it ("o") for the requests.
        local _, _, err = re_find("", pattern, "jo")
        if err then
            return "not a valid PCRE (" .. tostring(err) .. ")"
        end
        c.regexes[#c.regexes + 1] = { pattern = pattern, source = re }
    end)
    kind("user_agents", function(s)
        c.uas[#c.uas + 1] = s
    end)
    return c
end

-- Compiled lists per node config table (weak: they go with the rules that
-- hold the config, so there are never more than the loaded pow nodes).
local compiled_lists = setmetatable({}, { __mode = "k" })

local NO_CONFIG = {}

-- Compiles the whitelist and blacklist of a pow node config, once per
-- config table; where names the node in the warnings.
function _M.compile(config, where)
    if type(config) ~= "table" then
        config = NO_CONFIG
    end
    local lists = compiled_lists[config]
    if lists then
        return lists
    end
    where = where or "a pow node"
    local ignored = {}
    lists = {
        white = compile_list(config.whitelist, "whitelist", where, ignored),
        black = compile_list(config.blacklist, "blacklist", where, ignored),
    }
    if #ignored > 0 then
        ngx.log(ngx.WARN, "openflare pow: ", where, ": ignored ", table.concat(ignored, "; "))
    end
    compiled_lists[config] = lists
    return lists
end

-- Whether the request fields req ({remote, uri, ua}) match an entry of the
-- compiled list c. A regex that fails on the URI (the match limit) counts
-- as failed_is_hit says.
local function list_match(c, req, failed_is_hit)
    if c.ips[req.remote] then
        return true
    end
    if #c.cidrs > 0 then
        local addr = ipv4(req.remote)
        if addr then
            for _, cidr in ipairs(c.cidrs) do
                if floor(addr / cidr.size) == cidr.net then
                    return true
                end
            end
        end
    end
    if #c.globs > 0 then
        local uri = lower(req.uri)
        for _, g in ipairs(c.globs) do
            if glob_match(g, uri) then
                return true
            end
        end
    end
    for _, re in ipairs(c.regexes) do
        local from, _, err = re_find(req.uri, re.pattern, "jo")
        if from then
            return true
        end
        if err then
            if not re.warned then
                re.warned = true
                ngx.log(ngx.WARN, "openflare pow: ", c.where, ": ", c.name, ".path_regexes entry ", re.source,
                    " failed on a request (", err, "), which counts as ", failed_is_hit and "a hit" or "no hit",
                    "; logged once per worker")
            end
            if failed_is_hit then
                return true
            end
        end
    end
    for _, s in ipairs(c.uas) do
        if find(req.ua, s, 1, true) then
            return true
        end
    end
    return false
end

-- Whether the compiled lists (compile()) let a request with the fields req
-- ({remote, uri, ua}) skip the challenge: a whitelist hit, or a non-empty
-- blacklist without a hit. A regex that gives up never spares a request.
function _M.listed(lists, req)
    if lists.white.n > 0 and list_match(lists.white, req, false) then
        return true
    end
    local black = lists.black
    return black.n > 0 and not list_match(black, req, true)
end

local function listed_satisfied(config)
    local lists = _M.compile(config)
    if lists.white.n == 0 and lists.black.n == 0 then
        return false
    end
    return _M.listed(lists, {
        remote = ngx.var.remote_addr or "",
        uri = ngx.var.uri or "",
        ua = ngx.var.http_user_agent or "",
    })
end

-- ---------------------------------------------------------------------------
-- Trigger

local function starts_with(s, prefix)
    return find(s, prefix, 1, true) == 1
end

-- Whether the cookie names a session that satisfies the node cfg on host:
-- opened there, earned at cfg's difficulty or above, within both its own
-- and cfg's maximum lifetime and, when cfg binds sessions, for this
-- client. Renewal slides it by session_ttl, never past the end.
local function has_session(host, cfg)
    local token = ngx.var["cookie_" .. _M.COOKIE]
    local sessions = ngx.shared.openflare_pow_sessions
    if not _M.valid_token(token) or not sessions then
        return false
    end
    local value = sessions:get(token)
    local difficulty, opened, ends, host_key, client = (type(value) == "string" and value or ""):match(SESSION)
    if not difficulty or tonumber(difficulty) < cfg.difficulty or host_key ~= _M.host_key(host) then
        return false
    end
    if cfg.bind_client and client ~= client_key() then
        return false
    end
    local left = min(tonumber(ends), tonumber(opened) + cfg.session_max_lifetime) - ngx.now()
    if left <= 0 then
        return false
    end
    local ttl = min(cfg.session_ttl, left)
    if not sessions:expire(token, ttl) then
        return false
    end
    set_cookie(token, ttl)
    return true
end

-- Called by the WAF walk at a pow node. Returns "next" when the request is
-- satisfied, "takeover" when the PoW flow owns it (the caller stops the
-- walk and every later group), or "error" and a reason (fail closed).
function _M.evaluate(config)
    local host = ngx.var.host
    if not host or host == "" then
        return "next"
    end
    if listed_satisfied(config) then
        return "next"
    end
    local ok, err = _M.crypto_ready()
    if not ok then
        return "error", "pow: " .. err
    end
    local cfg = _M.normalise(config)
    if has_session(host, cfg) then
        return "next"
    end

    local uri = ngx.var.uri or ""
    if uri == _M.MAKE_CHALLENGE or uri == _M.PASS_CHALLENGE or starts_with(uri, _M.STATIC_PREFIX) then
        -- The request goes on to its own location.
        ngx.ctx.openflare_pow_config = cfg
        ngx.ctx.openflare_pow_takeover = true
        return "takeover"
    end
    if starts_with(uri, _M.API_PREFIX) then
        -- No other endpoint exists: never proxy these to the origin.
        ngx.ctx.openflare_waf_blocked = true
        ngx.ctx.openflare_pow_takeover = true
        ngx.exit(ngx.HTTP_NOT_FOUND)
        return "takeover"
    end

    local dict = ngx.shared.openflare_pow_config
    if not dict then
        return "error", "pow: lua_shared_dict openflare_pow_config is missing"
    end
    local id = ngx.var.request_id
    if type(id) ~= "string" or id == "" then
        id = _M.random_hex(16)
    end
    local key = CONFIG_KEY_PREFIX .. id
    local stored, serr = dict:set(key, cjson.encode(cfg), cfg.challenge_ttl)
    if not stored then
        return "error", "pow: cannot store the challenge config: " .. tostring(serr)
    end
    ngx.ctx.openflare_pow_takeover = true
    -- Nothing of the request goes with it: the page comes back to its own
    -- URL (the challenge is served in its place), so the pending challenge
    -- keeps no client-chosen bytes.
    ngx.exec(_M.MAKE_CHALLENGE, { openflare_pow_config_key = key })
    return "takeover"
end

function _M.check()
end

return _M
