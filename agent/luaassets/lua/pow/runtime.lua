-- Proof-of-work challenge: the shared part of the flow (DATAPLANE 6).
--
-- evaluate(config) runs when the WAF walk reaches a pow node and decides
-- whether the request already holds a session ("next"), or whether the PoW
-- flow takes it over ("takeover": the challenge page is served in place of
-- the requested URL, through an internal redirect to make-challenge).
-- challenge.lua and verify.lua use the helpers below: SHA-256 and random
-- bytes from the libcrypto nginx already links (LuaJIT FFI), the cookie,
-- the redirect check and the localised strings.
--
-- check() is the access-phase hook that older rendered configs still call;
-- the decision itself is taken inside the graph, so it does nothing.

local ffi = require("ffi")
local cjson = require("cjson.safe")

local ngx = ngx
local byte = string.byte
local find = string.find
local floor = math.floor
local ipairs = ipairs
local lower = string.lower
local pcall = pcall
local sub = string.sub
local tonumber = tonumber
local tostring = tostring
local type = type

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

-- The node config with defaults applied and the values bounded.
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

function _M.set_cookie(token, ttl)
    local cookie = _M.COOKIE .. "=" .. token .. "; Path=/; HttpOnly; SameSite=Lax; Max-Age=" .. tostring(ttl)
    if ngx.var.scheme == "https" then
        cookie = cookie .. "; Secure"
    end
    ngx.header["Set-Cookie"] = cookie
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

local function ipv4(s)
    local a, b, c, d = (s or ""):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    a, b, c, d = tonumber(a), tonumber(b), tonumber(c), tonumber(d)
    if not a or a > 255 or b > 255 or c > 255 or d > 255 then
        return nil
    end
    return ((a * 256 + b) * 256 + c) * 256 + d
end

local function in_cidr(addr, cidr)
    local net, bits = cidr:match("^([%d.]+)/(%d+)$")
    local base = ipv4(net)
    bits = tonumber(bits)
    if not base or not bits or bits > 32 then
        return false
    end
    local size = 2 ^ (32 - bits)
    return floor(addr / size) == floor(base / size)
end

local function glob_match(pattern, s)
    local lp = "^" .. lower(pattern):gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
    return find(lower(s), lp) ~= nil
end

local function strings_of(list)
    if type(list) ~= "table" then
        return {}
    end
    local out = {}
    for _, v in ipairs(list) do
        if type(v) == "string" and v ~= "" then
            out[#out + 1] = v
        end
    end
    return out
end

-- Returns whether the request matches any entry, and the number of entries.
local function list_match(spec)
    if type(spec) ~= "table" then
        return false, 0
    end
    local n = 0
    local matched = false
    local remote = ngx.var.remote_addr or ""
    local uri = ngx.var.uri or ""
    local ua = ngx.var.http_user_agent or ""
    for _, ip in ipairs(strings_of(spec.ips)) do
        n = n + 1
        matched = matched or ip == remote
    end
    local addr = ipv4(remote)
    for _, cidr in ipairs(strings_of(spec.ip_cidrs)) do
        n = n + 1
        matched = matched or (addr ~= nil and in_cidr(addr, cidr))
    end
    for _, p in ipairs(strings_of(spec.paths)) do
        n = n + 1
        matched = matched or glob_match(p, uri)
    end
    for _, re in ipairs(strings_of(spec.path_regexes)) do
        n = n + 1
        matched = matched or ngx.re.find(uri, re, "jo") ~= nil
    end
    for _, s in ipairs(strings_of(spec.user_agents)) do
        n = n + 1
        matched = matched or find(ua, s, 1, true) ~= nil
    end
    return matched, n
end

local function listed_satisfied(config)
    if type(config) ~= "table" then
        return false
    end
    if list_match(config.whitelist) then
        return true
    end
    local matched, n = list_match(config.blacklist)
    return n > 0 and not matched
end

-- ---------------------------------------------------------------------------
-- Trigger

local function starts_with(s, prefix)
    return find(s, prefix, 1, true) == 1
end

local function has_session(host, ttl)
    local v = ngx.var["cookie_" .. _M.COOKIE]
    if not _M.valid_token(v) then
        return false
    end
    local sessions = ngx.shared.openflare_pow_sessions
    if not sessions then
        return false
    end
    local key = host .. ":" .. v
    if not sessions:get(key) then
        return false
    end
    -- Sliding renewal.
    sessions:set(key, "1", ttl)
    _M.set_cookie(v, ttl)
    return true
end

-- The URL the visitor asked for, to come back to after the challenge.
local function original_url(host)
    local target = ngx.var.request_uri
    if type(target) ~= "string" or byte(target, 1) ~= 47 then
        target = ngx.var.uri or "/"
        local args = ngx.var.args
        if args and args ~= "" then
            target = target .. "?" .. args
        end
    end
    return ngx.var.scheme .. "://" .. host .. target
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
    if has_session(host, cfg.session_ttl) then
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
    ngx.exec(_M.MAKE_CHALLENGE, { redir = original_url(host), openflare_pow_config_key = key })
    return "takeover"
end

function _M.check()
end

return _M
