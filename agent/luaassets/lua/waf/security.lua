-- security_check node (DATAPLANE 2.6): is the request free of the attack
-- signatures its enabled flags name?
--
-- Matching is one pass per normalised input string: compile(config) builds
-- (once per worker and distinct flag set, shared between nodes) one
-- Aho-Corasick automaton per input set (PATH, QUERY, HDR, BODY and its
-- multipart/XML variants) over every enabled flag's tokens, as a dense
-- table of byte-class transitions in FFI memory. Scanning a string costs
-- one table step per byte, whatever the number of flags and tokens.
-- All tokens are lower-case and the byte classes fold case, so this is a
-- plain substring search of the lower-cased inputs. The few documented
-- non-literal rules (sleep(<digit>, javascript: in context, the first
-- eval() are tokens with a small check of the bytes around the match.
--
-- The query string is first scanned whole, decoded as the per-argument
-- strings are (see query_hit): a clean query, the common case, then costs
-- neither the argument table nor one scan per argument.

local aho = require("waf.aho")
local ffi = require("ffi")

local ngx = ngx
local byte = string.byte
local cast = ffi.cast
local find = string.find
local lower = string.lower
local unescape = ngx.unescape_uri
local sub = string.sub
local concat = table.concat
local ipairs = ipairs
local pairs = pairs
local setmetatable = setmetatable
local tonumber = tonumber
local type = type

local u8p = ffi.typeof("const uint8_t *")
local i32p = ffi.typeof("const int32_t *")

local _M = {}

local MAX_ARGS = 100
local MAX_BODY = 65536

-- Bytes PCRE's \s accepts: tab, LF, VT, FF, CR, space.
local SPACE = { [9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [32] = true }

-- Index of the first byte at or after i that is not white space.
local function skip_space(s, i)
    while SPACE[byte(s, i)] do
        i = i + 1
    end
    return i
end

-- Token checks: called with the string and the index of the token's last
-- byte; true means a hit.

-- sleep( / benchmark( followed by optional white space and a digit.
local function then_digit(s, i)
    local b = byte(s, skip_space(s, i + 1))
    return b ~= nil and b >= 48 and b <= 57
end

local QUOTE_OR_PAREN = { [34] = true, [39] = true, [96] = true, [40] = true } -- " ' ` (
local JS_BEFORE = { [61] = true, [34] = true, [39] = true, [40] = true, [60] = true, [59] = true, [44] = true } -- = " ' ( < ; ,

-- The scanned strings keep their case (see build_scanner).
local function at(s, i, word)
    return lower(sub(s, i, i + #word - 1)) == word
end

-- javascript: at the start or after = " ' ( < ; , then optional white space
-- and a quote, backtick or "(", or alert( / void( / eval( (white space
-- allowed before "("), or window. / document.
local function javascript(s, i)
    local start = i - 10 -- #"javascript:" == 11
    if start > 1 and not JS_BEFORE[byte(s, start - 1)] then
        return false
    end
    local j = skip_space(s, i + 1)
    if QUOTE_OR_PAREN[byte(s, j)] then
        return true
    end
    for _, w in ipairs({ "alert", "void", "eval" }) do
        if at(s, j, w) then
            return byte(s, skip_space(s, j + #w)) == 40
        end
    end
    return at(s, j, "window.") or at(s, j, "document.")
end

-- eval( followed by optional white space and a quote, backtick or "(";
-- the scanner calls it for the first eval( of a string only.
local function eval_call(s, i)
    return QUOTE_OR_PAREN[byte(s, skip_space(s, i + 1))] == true
end

-- Flags in check order: name, the input sets searched, the literal tokens
-- and the tokens with a check.
local FLAGS = {
    {
        name = "path_traversal",
        sets = { PATH = true, QUERY = true, BODY = true },
        tokens = { "../", "..\\", "..%2f", "..%5c", "%2e%2e/", "%2e%2e\\", "%252e%252e", "....//", "/etc/passwd" },
    },
    {
        name = "file_inclusion",
        sets = { PATH = true, QUERY = true, BODY = true },
        tokens = { "php://", "file://", "zip://", "data://text", "expect://", "/etc/passwd", "/proc/self", "%00" },
    },
    {
        name = "sql_injection",
        sets = { QUERY = true, HDR = true, BODY = true },
        tokens = { "union select", " or 1=1", "' or '", "\" or \"", "information_schema", "xp_cmdshell", "load_file(",
            " into outfile", "/**/", "/*!", "*/--", "@@version" },
        checked = { { "sleep(", then_digit }, { "benchmark(", then_digit } },
    },
    {
        name = "command_injection",
        sets = { QUERY = true, HDR = true, BODY = true },
        tokens = { ";wget", ";curl", ";bash", ";sh ", "|bash", "|sh ", "|sh\t", "`id`", "$(id)", "&&wget", "&&curl",
            "&&bash", "&&sh ", "||wget", "||curl", "||bash", "/bin/sh ", "/bin/bash ", "cmd.exe /c", "powershell -",
            "powershell.exe" },
    },
    {
        name = "xss",
        sets = { QUERY = true, HDR = true, BODY = true },
        tokens = { "<script", "<iframe", "onerror=", "onload=", "onmouseover=", "document.cookie" },
        checked = { { "javascript:", javascript }, { "eval(", eval_call } },
    },
    {
        name = "ssrf",
        sets = { QUERY = true, HDR = true, BODY = true },
        tokens = { "http://127.0.0.1", "https://127.0.0.1", "http://localhost", "https://localhost", "http://0.0.0.0",
            "https://0.0.0.0", "http://[::1]", "https://[::1]", "://169.254.", "169.254.169.254", "metadata.google",
            "file://", "gopher://", "dict://" },
    },
    {
        name = "crlf_injection",
        sets = { QUERY = true, HDR = true, BODY = true },
        tokens = { "%0d%0a", "\r\n" },
    },
    {
        name = "malicious_upload",
        sets = { UPLOAD = true },
        tokens = { ".php.", ".jsp.", ".asp.", ".aspx.", ".phtml", ".phar", "application/x-php", "application/x-httpd-php" },
    },
    {
        name = "xxe",
        sets = { XML = true },
        tokens = { "<!entity", " system \"", " system '", "file://" },
    },
}

_M.FLAGS = {}
for i, f in ipairs(FLAGS) do
    _M.FLAGS[i] = f.name
end

-- Builds the scanner for entries { {token, check|false}... }: the
-- automaton of waf/aho.lua, case folded, as a dense FFI table.
local function build_scanner(entries)
    local tokens = {}
    for i, e in ipairs(entries) do
        tokens[i] = e[1]
    end
    local a = aho.build(tokens, true)
    local ncls, delta, order, nstates = a.ncls, a.delta, a.order, a.nstates
    local cls = ffi.new("uint8_t[256]")
    for b = 0, 255 do
        cls[b] = a.cls[b]
    end
    -- hit[state]: a literal token ends here (or at a suffix); checks[state]:
    -- the checks of the checked tokens ending there.
    local hit, checks = {}, {}
    for st, idx in pairs(a.out) do
        for _, i in ipairs(idx) do
            local ck = entries[i][2]
            if ck then
                checks[st] = checks[st] or {}
                checks[st][#checks[st] + 1] = ck
            else
                hit[st] = true
            end
        end
    end

    -- Renumber: states without output first, then the accepting ones, and
    -- store each transition as the target's row offset, so a scan step is
    -- one load and "accepting?" one pointer comparison.
    local num, n, first_accept = {}, 0, nil
    for pass = 1, 2 do
        for _, st in ipairs(order) do
            local accepting = hit[st] == true or checks[st] ~= nil
            if accepting == (pass == 2) then
                num[st] = n
                n = n + 1
            end
        end
        if pass == 1 then
            first_accept = n * ncls
        end
    end
    local table_ = ffi.new("int32_t[?]", nstates * ncls)
    local out = {}
    for _, st in ipairs(order) do
        local row = num[st] * ncls
        for c = 0, ncls - 1 do
            table_[row + c] = num[delta[st * ncls + c]] * ncls
        end
        if hit[st] then
            out[row] = true
        elseif checks[st] then
            out[row] = checks[st]
        end
    end
    local base = cast(i32p, table_)
    -- delta keeps the array alive: base does not.
    return { cls = cls, delta = table_, base = base, accept = base + first_accept, out = out, states = nstates }
end

-- True when s contains a token of the scanner. The state is a pointer to
-- its row: as a Lua number it would be converted to and from a double at
-- every byte, on the loop's critical path (measured 2.4 times slower).
local function scan(sc, s)
    local cls, base, accept = sc.cls, sc.base, sc.accept
    local p = cast(u8p, s)
    local row = base
    local eval_seen = false
    for i = 0, #s - 1 do
        row = base + row[cls[p[i]]]
        if row >= accept then
            local o = sc.out[tonumber(row - base)]
            if o == true then
                return true
            end
            for _, fn in ipairs(o) do
                if fn == eval_call then
                    -- Only the first eval( of the string is looked at.
                    if not eval_seen then
                        eval_seen = true
                        if fn(s, i + 1) then
                            return true
                        end
                    end
                elseif fn(s, i + 1) then
                    return true
                end
            end
        end
    end
    return false
end

-- The runtime accepts true, 1, "true" and "1" as "on".
local function flag_on(v)
    return v == true or v == 1 or v == "true" or v == "1"
end

-- Automata shared by every node with the same flags, per input set.
local scanners = {}

-- The scanner for the enabled flags that search any of the given input
-- sets, or nil when none does. A lenient scanner takes a checked token
-- for a hit without its check: a superset, for a quick "certainly clean".
local function scanner(enabled, lenient, ...)
    local wanted = { ... }
    local entries, names = {}, {}
    for _, f in ipairs(enabled) do
        local used = false
        for _, set in ipairs(wanted) do
            used = used or f.sets[set] == true
        end
        if used then
            names[#names + 1] = f.name
            for _, tok in ipairs(f.tokens) do
                entries[#entries + 1] = { tok, false }
            end
            for _, ck in ipairs(f.checked or {}) do
                entries[#entries + 1] = { ck[1], not lenient and ck[2] }
            end
        end
    end
    if #entries == 0 then
        return nil
    end
    local key = concat(names, ",") .. (lenient and "+lenient" or "")
    local sc = scanners[key]
    if not sc then
        sc = build_scanner(entries)
        scanners[key] = sc
    end
    return sc
end

local compiled = setmetatable({}, { __mode = "k" })

-- Compiles one node config into its scanners. Returns the checker.
function _M.compile(config)
    local c = compiled[config]
    if c then
        return c
    end
    local enabled = {}
    for _, f in ipairs(FLAGS) do
        if flag_on(config[f.name]) then
            enabled[#enabled + 1] = f
        end
    end
    c = { any = #enabled > 0 }
    if c.any then
        c.path = scanner(enabled, false, "PATH")
        c.query = scanner(enabled, false, "QUERY")
        c.query_whole = scanner(enabled, true, "QUERY")
        c.hdr = scanner(enabled, false, "HDR")
        -- The body scanner depends on the request's Content-Type: base,
        -- plus upload tokens (multipart), plus XXE tokens (XML), or both.
        c.body = {
            [0] = scanner(enabled, false, "BODY"),
            [1] = scanner(enabled, false, "BODY", "UPLOAD"),
            [2] = scanner(enabled, false, "BODY", "XML"),
            [3] = scanner(enabled, false, "BODY", "UPLOAD", "XML"),
        }
        c.xml_possible = scanner(enabled, false, "XML") ~= nil
    end
    compiled[config] = c
    return c
end

-- "+" becomes a space and %XX a byte; anything else, an invalid escape
-- included, is kept. A string with nothing to decode is returned as it
-- is rather than copied.
local function urldecode(s)
    if find(s, "%", 1, true) or find(s, "+", 1, true) then
        return unescape(s)
    end
    return s
end

-- Scans s in its normalised forms: lower(d1) and, when different,
-- lower(d2) (the scanner folds case).
local function hit(sc, s)
    local d1 = urldecode(s)
    if scan(sc, d1) then
        return true
    end
    if d1 == s then
        -- Nothing to decode: the second decode changes nothing either.
        return false
    end
    local d2 = urldecode(d1)
    return d2 ~= d1 and scan(sc, d2)
end

local function hit_value(sc, v)
    local t = type(v)
    if t == "string" then
        return hit(sc, v)
    elseif t == "boolean" then
        -- A value-less argument is the string "true".
        return hit(sc, "true")
    elseif t == "table" then
        for _, x in ipairs(v) do
            if hit_value(sc, x) then
                return true
            end
        end
    end
    return false
end

-- get_uri_args decodes each key and value once, and each is scanned
-- decoded once and twice more. No %XX escape spans a '&' or '=', so each
-- of those strings is a substring of the whole query decoded two or three
-- times: when neither of these holds a token, even leniently (a checked
-- token's context differs there), no argument does, whatever the argument
-- limit. Otherwise the arguments decide.
local function query_hit(c)
    local raw = ngx.var.args
    if not raw or raw == "" then
        return false
    end
    local d2 = urldecode(urldecode(raw))
    local maybe = scan(c.query_whole, d2)
    if not maybe then
        local d3 = urldecode(d2)
        maybe = d3 ~= d2 and scan(c.query_whole, d3)
    end
    if not maybe then
        return false
    end
    local sc = c.query
    local args = ngx.req.get_uri_args(MAX_ARGS)
    for k, v in pairs(args) do
        if hit(sc, k) or hit_value(sc, v) then
            return true
        end
    end
    return false
end

-- The request body when it should be scanned: Content-Length in
-- (0, 65536] and kept in memory. nil otherwise.
local function body()
    local len = tonumber(ngx.var.http_content_length)
    if not len or len <= 0 or len > MAX_BODY then
        return nil
    end
    ngx.req.read_body()
    return ngx.req.get_body_data()
end

local function body_hit(c)
    local data = body()
    if not data then
        return false
    end
    local ct = lower(ngx.var.http_content_type or "")
    local kind = 0
    if find(ct, "multipart/", 1, true) then
        kind = 1
    end
    if c.xml_possible then
        local xml = find(ct, "xml", 1, true) ~= nil
        if not xml then
            -- The body itself declares XML, in any of its normalised forms.
            local d1 = urldecode(data)
            xml = find(lower(d1), "<?xml", 1, true) ~= nil or find(lower(urldecode(d1)), "<?xml", 1, true) ~= nil
        end
        if xml then
            kind = kind + 2
        end
    end
    local sc = c.body[kind]
    return sc ~= nil and hit(sc, data)
end

-- Returns true when the request is clean, false on a hit.
function _M.check(config)
    local c = compiled[config] or _M.compile(config)
    if not c.any then
        return true
    end
    if c.path and hit(c.path, ngx.var.uri or "") then
        return false
    end
    if c.query and query_hit(c) then
        return false
    end
    if c.hdr then
        local cookie = ngx.var.http_cookie
        if cookie and hit(c.hdr, cookie) then
            return false
        end
        local referer = ngx.var.http_referer
        if referer and hit(c.hdr, referer) then
            return false
        end
    end
    if body_hit(c) then
        return false
    end
    return true
end

-- For tests: does s, normalised, hit the tokens that config's enabled
-- flags search in input set "PATH", "QUERY" or "HDR"?
function _M.hits(config, set, s)
    local c = compiled[config] or _M.compile(config)
    local sc = c.any and c[({ PATH = "path", QUERY = "query", HDR = "hdr" })[set]]
    return sc and hit(sc, s) or false
end

return _M
