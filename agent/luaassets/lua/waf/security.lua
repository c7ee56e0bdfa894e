-- security_check node (DATAPLANE 2.6): is the request free of the attacks
-- its enabled flags name?
--
-- What is inspected is what the origin gets: the raw request path
-- (percent-decoded once, twice and three times, and nginx's normalised
-- $uri), every query argument, the headers origins read (all their
-- values when repeated), and the body up to the inspection limit (read
-- in memory or from nginx's temp file, chunked and HTTP/2 included),
-- decoded from gzip or deflate and parsed by its type: form fields,
-- multipart fields and files, JSON strings with their escapes decoded,
-- XML text (UTF-16 and UTF-32 transcoded). Each value is decoded like the
-- layers behind the WAF might (URL-decoding up to three times, %uXXXX,
-- overlong UTF-8) and every form goes through one pass of a prefilter:
-- an Aho-Corasick automaton (waf/aho.lua) over the bytes each detector
-- needs to see before it can hit (a quote for SQL, "<" or "=" for XSS,
-- ...). A detector runs only on the forms that have its bytes, so a clean
-- value costs one table step per byte. The detectors are waf/sqli.lua,
-- waf/xss.lua, waf/cmdi.lua and waf/paths.lua; all are linear in their
-- input.
--
-- Caps: 1,000 query arguments, cookies, form fields or multipart parts
-- (a request past one is refused: false, never passed unscanned),
-- body_inspect_bytes of body (64 KiB by default; past it the first bytes are inspected, or
-- with oversize_body = "refuse" the request gets a 413), 16 KiB of escapes
-- decoded past the application's reading in the path, query and headers
-- (DEEP_BUDGET; refused past it). A body in a Content-Encoding other than
-- gzip and deflate gets a 415.

local aho = require("waf.aho")
local decode = require("waf.decode")
local sqli = require("waf.sqli")
local xss = require("waf.xss")
local cmdi = require("waf.cmdi")
local code = require("waf.code")
local paths = require("waf.paths")
local ffi = require("ffi")
local bit = require("bit")

local ngx = ngx
local band, bor, rshift = bit.band, bit.bor, bit.rshift
local byte = string.byte
local cast = ffi.cast
local find = string.find
local gmatch = string.gmatch
local gsub = string.gsub
local io_open = io.open
local lower = string.lower
local min = math.min
local sub = string.sub
local ipairs = ipairs
local pairs = pairs
local setmetatable = setmetatable
local tonumber = tonumber
local type = type

local u8p = ffi.typeof("const uint8_t *")
local i32p = ffi.typeof("const int32_t *")

local _M = {}

local MAX_ARGS = 1000
local DEFAULT_BODY_LIMIT = 65536
local MAX_BODY_LIMIT = 16 * 1048576

-- Detector bits.
-- Detector bits: a flag runs a group of them, each only on the forms
-- that have its tokens. SENS (sensitive file names) serves both
-- path_traversal and file_inclusion; xss's four are its tag, handler,
-- URL and call rules (waf/xss.lua's parts, shifted).
local TRAV, SENS, LFI, SQL, CMD, CODE, SSRF, CRLF = 1, 2, 4, 8, 16, 32, 64, 128
local XTAG, XHANDLER, XURL, XCALL = 256, 512, 1024, 2048
local XSS = XTAG + XHANDLER + XURL + XCALL
local XSS_SHIFT = 8

-- Flags in check order and the detector bits each runs (upload and XXE
-- are checked on the body's structure, not per value).
local FLAGS = {
    { name = "path_traversal", bits = TRAV + SENS },
    { name = "file_inclusion", bits = LFI + SENS },
    { name = "sql_injection", bits = SQL },
    { name = "command_injection", bits = CMD + CODE },
    { name = "xss", bits = XSS },
    { name = "ssrf", bits = SSRF },
    { name = "crlf_injection", bits = CRLF },
    { name = "malicious_upload" },
    { name = "xxe" },
}

_M.FLAGS = {}
for i, f in ipairs(FLAGS) do
    _M.FLAGS[i] = f.name
end

-- Which detectors read which inputs. Headers: Cookie, Referer,
-- User-Agent and the forwarding headers applications log and trust;
-- traversal and inclusion are for paths and parameters only.
local HEADER_BITS = bor(SQL, CMD, CODE, XSS, CRLF, SSRF)
local SOURCE_BITS = {
    PATH = bor(TRAV, SENS, LFI, SQL, CMD, CODE, XSS, CRLF),
    QUERY = bor(TRAV, SENS, LFI, SQL, CMD, CODE, XSS, SSRF, CRLF),
    HDR = HEADER_BITS,
    UA = bor(SQL, CMD, CODE, XSS, CRLF),
    BODY = bor(TRAV, SENS, LFI, SQL, CMD, CODE, XSS, SSRF, CRLF),
}
local HEADERS = { "cookie", "referer", "user-agent", "x-forwarded-for", "x-forwarded-host", "x-real-ip",
    "true-client-ip", "origin" }
local HEADER_SOURCE = { ["user-agent"] = "UA", ["x-forwarded-for"] = "UA", ["x-real-ip"] = "UA",
    ["true-client-ip"] = "UA" }

-- Prefilter tokens per detector: a detector cannot hit a string that has
-- none of its tokens (lower-case; the automaton folds case).
local SQL_WORDS = { "'", '"', "`", ";", "=", "<", ">", "(", "#", "--", "/*", "|", "&", "@", "union", "select", "order",
    "group", "having", "procedure", "limit", "waitfor", "xp_", "sp_", "like", "between", "regexp", "case" }
local TOKENS = {
    [TRAV] = { ".." },
    [SENS] = { "etc/", "etc\\", "proc/", "win.ini", "boot.ini", "system32", "system.ini", ".ht", "web.config",
        "wp-config", "id_rsa", ".ssh", ".bash_history", ".git/", ".svn/", ".env", "web-inf", "meta-inf", ".aws",
        "serviceaccount", ".docker", ".kube" },
    [LFI] = { "://", "\0", "data:", "jar:", "netdoc:", "\\\\", "//" },
    [SQL] = SQL_WORDS,
    [CMD] = { ";", "|", "&", "`", "$", "\n", "\r", "<(", "://", "/bin/", "/dev/", "/etc/", "/tmp/", "cmd",
        "powershell", "()" },
    [CODE] = { "<?", "{php}", "{{", "${", "#{", "%{", ':"', ":{", "system", "exec", "passthru", "popen", "proc_open",
        "eval", "assert", "create_function", "call_user_func", "array_map", "usort", "preg_replace",
        "file_put_contents", "fwrite", "include", "require", "highlight_file", "show_source", "phpinfo",
        "base64_decode", "str_rot13", "gzinflate", "file_get_contents", "allow_url_include", "auto_prepend_file",
        "disable_functions", "$_", "$globals", "java.", "javax.", "getruntime", "processbuilder", "forname(",
        "getclassloader", "initialcontext", "invokertransformer", "jdbcrowsetimpl", "memberaccess", "ognl", "t(org.",
        "classloader", "ro0ab", "\172\237\0\5", "commons.collections", "templatesimpl", '"@', "7*7" },
    [XTAG] = { "<", "&lt", "&#", "\0" },
    [XHANDLER] = { "on", "\0" },
    [XURL] = { "script:", "script&", "data:", "&#", "&colon", "\0" },
    [XCALL] = { "alert", "prompt", "confirm", "eval", "settimeout", "setinterval", "execscript", "fromcharcode",
        "constructor", "msgbox", "import", "document", "innerhtml", "window", "expression", "&#", "&lpar", "\0" },
    [SSRF] = { "://", "169.254.", "metadata" },
    [CRLF] = { "\r", "\n", "\\n" },
}

-- Builds the prefilter for the enabled bits: a dense FFI table of the
-- automaton's byte-class transitions, each accepting state's row mapped
-- to the bits of the tokens ending there.
local function build_prefilter(bits)
    local tokens, mask_of = {}, {}
    for b, toks in pairs(TOKENS) do
        if band(bits, b) ~= 0 then
            for _, t in ipairs(toks) do
                if not mask_of[t] then
                    tokens[#tokens + 1] = t
                    mask_of[t] = 0
                end
                mask_of[t] = bor(mask_of[t], b)
            end
        end
    end
    if #tokens == 0 then
        return nil
    end
    local a = aho.build(tokens, true)
    local ncls, delta, order, nstates = a.ncls, a.delta, a.order, a.nstates
    local cls = ffi.new("uint8_t[256]")
    for b = 0, 255 do
        cls[b] = a.cls[b]
    end
    local mask = {}
    for st, idx in pairs(a.out) do
        local m = 0
        for _, i in ipairs(idx) do
            m = bor(m, mask_of[tokens[i]])
        end
        mask[st] = m
    end
    -- Each transition is stored as its target's row offset, and each row
    -- ends with one more entry: the bits of the tokens ending there (0
    -- for most).
    local width = ncls + 1
    local num = {}
    for i, st in ipairs(order) do
        num[st] = (i - 1) * width
    end
    local tbl = ffi.new("int32_t[?]", nstates * width)
    for _, st in ipairs(order) do
        local row = num[st]
        for c = 0, ncls - 1 do
            tbl[row + c] = num[delta[st * ncls + c]]
        end
        tbl[row + ncls] = mask[st] or 0
    end
    return { cls = cls, tbl = tbl, base = cast(i32p, tbl), ncls = ncls }
end

-- The detector bits of wanted whose tokens s contains. The state is a
-- pointer to its row: as a Lua number it would be converted to and from a
-- double at every byte, on the loop's critical path. Every byte ORs in its
-- row's bits, accepting or not: a branch there would leave the compiled
-- loop for a side trace at each token byte, which made a run of quotes
-- cost ten times a run of letters. Whether all of wanted is in is asked
-- once a block.
local BLOCK = 256

local function prefilter(pf, s, wanted)
    local cls, base, ncls = pf.cls, pf.base, pf.ncls
    local p = cast(u8p, s)
    local row = base
    local m = 0
    local len = #s
    local i = 0
    while i < len do
        local e = min(i + BLOCK, len)
        for j = i, e - 1 do
            row = base + row[cls[p[j]]]
            m = bor(m, row[ncls])
        end
        if band(m, wanted) == wanted then
            return wanted
        end
        i = e
    end
    return band(m, wanted)
end

-- The runtime accepts true, 1, "true" and "1" as "on".
local function flag_on(v)
    return v == true or v == 1 or v == "true" or v == "1"
end

local prefilters = {}
local compiled = setmetatable({}, { __mode = "k" })

-- Compiles one node config. Returns the checker.
function _M.compile(config)
    local c = compiled[config]
    if c then
        return c
    end
    local bits = 0
    c = { on = {} }
    for _, f in ipairs(FLAGS) do
        if flag_on(config[f.name]) then
            c.on[f.name] = true
            bits = bor(bits, f.bits or 0)
        end
    end
    c.bits = bits
    c.upload = c.on.malicious_upload == true
    c.xxe = c.on.xxe == true
    c.any = bits ~= 0 or c.upload or c.xxe
    if bits ~= 0 then
        local pf = prefilters[bits]
        if not pf then
            pf = build_prefilter(bits)
            prefilters[bits] = pf
        end
        c.pf = pf
    end
    local limit = tonumber(config.body_inspect_bytes)
    if not limit or limit < 1 then
        limit = DEFAULT_BODY_LIMIT
    end
    c.limit = math.min(math.floor(limit), MAX_BODY_LIMIT)
    c.refuse_oversize = config.oversize_body == "refuse"
    compiled[config] = c
    return c
end

-- Runs the detectors of bits (already filtered) on one form; returns the
-- flag that hit, or nil.
local function run(c, bits, s, name)
    local l = lower(s)
    if band(bits, TRAV) ~= 0 and paths.traversal(l) then
        return "path_traversal"
    end
    if band(bits, SENS) ~= 0 and paths.sensitive_file(l) then
        return c.on.path_traversal and "path_traversal" or "file_inclusion"
    end
    if band(bits, LFI) ~= 0 and paths.inclusion(l, name) then
        return "file_inclusion"
    end
    if band(bits, SQL) ~= 0 and sqli.detect(l) then
        return "sql_injection"
    end
    if (band(bits, CMD) ~= 0 and cmdi.detect(l, s)) or (band(bits, CODE) ~= 0 and code.detect(l)) then
        return "command_injection"
    end
    if band(bits, XSS) ~= 0 and xss.detect(l, rshift(band(bits, XSS), XSS_SHIFT)) then
        return "xss"
    end
    if band(bits, SSRF) ~= 0 and paths.ssrf(l) then
        return "ssrf"
    end
    if band(bits, CRLF) ~= 0 and paths.crlf(l) then
        return "crlf_injection"
    end
    return nil
end

-- Scans one form: prefilter, then the detectors it let through.
local function scan_form(c, allowed, s, name)
    if allowed == 0 then
        return nil
    end
    local bits = prefilter(c.pf, s, allowed)
    if bits == 0 then
        return nil
    end
    return run(c, bits, s, name)
end

-- Scans a value as the application sees it (v) and as further decoding
-- layers might: URL-decoded once and twice more, %uXXXX, overlong UTF-8.
-- name: the lower-cased parameter name, for the rules that read it.
-- deep_left is what is left of the request's budget of bytes that had
-- %XX escapes decoded past the application's own reading, in its path,
-- query and headers (scan_request sets it). Each such form costs another
-- pass of the prefilter and maybe of the detectors; values escaped twice
-- and three times over many kilobytes are what an attacker sends to
-- multiply that cost, not what a browser sends, so past the budget the
-- request is refused rather than passed unscanned. A form that only turns
-- "+" into spaces is free (base64 and "C++" are ordinary and it cannot
-- nest), and the body is only bounded by its inspection limit: long
-- documents with a link in them are ordinary there.
local DEEP_BUDGET = 16384
local deep_left = DEEP_BUDGET

local function scan_value(c, allowed, v, name)
    local hit = scan_form(c, allowed, v, name)
    if hit or decode.plain(v) then
        -- nothing for decode.percent_u, component or fold to change: a
        -- flood of short pieces pays for one pass each, not six
        return hit
    end
    local u = decode.percent_u(v)
    if u ~= v then
        hit = scan_form(c, allowed, u, name)
        if hit then
            return hit
        end
    end
    local last = v
    for _ = 1, 2 do
        local d = decode.component(last)
        if d == last then
            break
        end
        if #d < #last then
            -- an escape was decoded ("+" keeps the length)
            deep_left = deep_left - #d
            if deep_left < 0 then
                return "refuse"
            end
        end
        hit = scan_form(c, allowed, d, name)
        if hit then
            return hit
        end
        last = d
    end
    local f = decode.fold(last)
    if f ~= last then
        return scan_form(c, allowed, f, name)
    end
    return nil
end

-- The scratch buffer scan_args copies a query into.
local scratch, scratch_len = nil, 0

-- raw with its separators (sep: "&" or the cookies' ";", and the "="
-- after each key) turned into a byte no prefilter token has, and the
-- number of pieces. One pass.
local function neutral(raw, sep)
    local len = #raw
    if len > scratch_len then
        scratch_len = math.max(len, 4096)
        scratch = ffi.new("uint8_t[?]", scratch_len)
    end
    local p = cast(u8p, raw)
    local pieces = 1
    local keyed = false
    for i = 0, len - 1 do
        local b = p[i]
        if b == sep then
            pieces = pieces + 1
            keyed = false
            b = 1
        elseif b == 61 and not keyed then
            -- the piece's first "=" ends its key; later ones are its value's
            keyed = true
            b = 1
        end
        scratch[i] = b
    end
    return ffi.string(scratch, len), pieces
end

-- Whether no form of the separator-neutral s passes the prefilter: s,
-- decoded rounds more times, %uXXXX and folded. The shortcut of pieces:
-- no %XX spans a separator, so each piece decoded is a substring of the
-- whole decoded the same number of times; when no form of the whole
-- passes the prefilter, no piece's does.
local function passes_nothing(c, allowed, s, rounds)
    local bits = prefilter(c.pf, s, allowed)
    local last = s
    for _ = 1, rounds do
        local d = decode.component(last)
        if d == last then
            break
        end
        bits = bor(bits, prefilter(c.pf, d, allowed))
        last = d
    end
    return bits == 0 and decode.percent_u(s) == s and decode.fold(last) == last
end

-- Every "k=v" piece of raw: the key and the value as the application
-- reads them (decoded once) and decoded further.
local function scan_pieces(c, allowed, raw)
    local i, len = 1, #raw
    while i <= len do
        local amp = find(raw, "&", i, true) or len + 1
        if amp > i then
            local eq = find(raw, "=", i, true)
            local k, v
            if eq and eq < amp then
                k, v = decode.component(sub(raw, i, eq - 1)), decode.component(sub(raw, eq + 1, amp - 1))
            else
                k, v = decode.component(sub(raw, i, amp - 1)), ""
            end
            local hit = scan_value(c, allowed, k, nil) or (v ~= "" and scan_value(c, allowed, v, lower(k)))
            if hit then
                return hit
            end
        end
        i = amp + 1
    end
    return nil
end

-- Scans a urlencoded string (query or form body), every "k=v" piece's key
-- and value as the application reads them (decoded once) and decoded
-- further, unless no form of the whole passes the prefilter
-- (passes_nothing). Past MAX_ARGS pieces the request is refused either
-- way, unless whole: a string no application splits (a Referer's query)
-- is then scanned as one value. Returns a flag, "refuse", or nil.
local function scan_args(c, allowed, raw, whole_past_cap)
    if allowed == 0 then
        return nil
    end
    if not find(raw, "&", 1, true) then
        -- one piece, the whole: the shortcut would only scan it twice
        return scan_pieces(c, allowed, raw)
    end
    local whole, pieces = neutral(raw, 38)
    if pieces > MAX_ARGS then
        if whole_past_cap then
            return scan_value(c, allowed, raw)
        end
        return "refuse"
    end
    if passes_nothing(c, allowed, decode.component(whole), 2) then
        return nil
    end
    return scan_pieces(c, allowed, raw)
end

-- The raw path (before "?"), decoded up to three times, and $uri.
local function scan_path(c)
    local allowed = band(c.bits, SOURCE_BITS.PATH)
    if allowed == 0 then
        return nil
    end
    local raw = ngx.var.request_uri or ""
    local q = find(raw, "?", 1, true)
    if q then
        raw = sub(raw, 1, q - 1)
    end
    local hit = scan_form(c, allowed, raw)
    local last = raw
    for round = 1, 3 do
        if hit then
            return hit
        end
        local d = decode.path(last)
        if d == last then
            break
        end
        if round > 1 then
            -- past what nginx decodes ($uri): the budget of scan_value
            deep_left = deep_left - #d
            if deep_left < 0 then
                return "refuse"
            end
        end
        hit = scan_form(c, allowed, d)
        last = d
    end
    if hit then
        return hit
    end
    local f = decode.fold(decode.percent_u(last))
    if f ~= last then
        hit = scan_form(c, allowed, f)
        if hit then
            return hit
        end
    end
    local uri = ngx.var.uri or ""
    if uri ~= last then
        return scan_form(c, allowed, uri)
    end
    return nil
end

local function scan_header_value(c, h, v)
    local allowed = band(c.bits, SOURCE_BITS[HEADER_SOURCE[h] or "HDR"])
    if allowed == 0 then
        return nil
    end
    if h == "cookie" then
        -- each cookie's name and value as they are sent (the application
        -- decodes them, if at all), like the pieces of a query; no
        -- browser sends a thousand cookies
        local whole, pieces = neutral(v, 59)
        if pieces > MAX_ARGS then
            return "refuse"
        end
        if passes_nothing(c, allowed, whole, 2) then
            return nil
        end
        local i, len = 1, #v
        while i <= len do
            local semi = find(v, ";", i, true) or len + 1
            if semi > i then
                local eq = find(v, "=", i, true)
                if eq and eq > semi then
                    eq = nil
                end
                local k = sub(v, i, (eq or semi) - 1)
                local hit = scan_value(c, allowed, k) or (eq and scan_value(c, allowed, sub(v, eq + 1, semi - 1), lower(k)))
                if hit then
                    return hit
                end
            end
            i = semi + 1
        end
        return nil
    end
    local q = h == "referer" and find(v, "?", 1, true)
    if not q then
        return scan_value(c, allowed, v)
    end
    -- the Referer's URL up to its query, then the query argument by
    -- argument
    return scan_value(c, allowed, sub(v, 1, q - 1)) or scan_args(c, allowed, sub(v, q + 1), true)
end

local function scan_headers(c)
    if band(c.bits, HEADER_BITS) == 0 and not c.upload then
        return nil
    end
    local headers = ngx.req.get_headers(0)
    for _, h in ipairs(HEADERS) do
        local v = headers[h]
        if type(v) == "table" then
            for _, x in ipairs(v) do
                local hit = scan_header_value(c, h, x)
                if hit then
                    return hit
                end
            end
        elseif v then
            local hit = scan_header_value(c, h, v)
            if hit then
                return hit
            end
        end
    end
    if band(c.bits, CODE) ~= 0 then
        -- Log4j lookups in any header a Java application might log
        -- (X-Api-Version, X-Request-Id, ...)
        for _, v in pairs(headers) do
            local vs = type(v) == "table" and v or { v }
            for _, x in ipairs(vs) do
                if type(x) == "string" and (find(x, "${", 1, true) or find(x, "%24%7", 1, true) or find(x, "%24{", 1, true)) then
                    local hit = scan_value(c, CODE, x)
                    if hit then
                        return hit
                    end
                end
            end
        end
    end
    if c.upload then
        for _, h in ipairs({ "x-file-name", "x-filename", "x_filename" }) do
            local v = headers[h]
            if type(v) == "string" and paths.upload_name(lower(v)) then
                return "malicious_upload"
            end
        end
    end
    return nil
end

-- The body, its first limit bytes: from memory or nginx's temp file.
-- Returns the bytes (nil when there is no body) and whether there were
-- more.
local function read_body(limit)
    ngx.req.read_body()
    local data = ngx.req.get_body_data()
    if not data then
        local file = ngx.req.get_body_file()
        if not file then
            return nil, false
        end
        local f = io_open(file, "rb")
        if not f then
            return nil, false
        end
        data = f:read(limit + 1)
        f:close()
        if not data then
            return nil, false
        end
    end
    if #data > limit then
        return sub(data, 1, limit), true
    end
    return data, false
end

-- The refusal statuses, sent by the node itself: they are about what the
-- WAF cannot inspect, not a verdict for the graph to route.
local function refuse(status)
    ngx.ctx.openflare_waf_blocked = true
    return ngx.exit(status)
end

-- Content-Encoding removed, in reverse order of application. Returns the
-- decoded bytes or nil (refused).
local function decode_content(data, limit)
    local ce = ngx.var.http_content_encoding
    if not ce or ce == "" then
        return data
    end
    local codings = {}
    for coding in gmatch(lower(ce), "[^,%s]+") do
        codings[#codings + 1] = coding
    end
    for i = #codings, 1, -1 do
        local coding = codings[i]
        if coding ~= "identity" then
            local out = decode.inflate(data, coding, limit)
            if not out then
                return nil
            end
            data = out
        end
    end
    return data
end

local function multipart_field(c, allowed, headers, content)
    local name = headers:match('[;%s]name%s*=%s*"([^"]*)"') or headers:match("[;%s]name%s*=%s*([^;%s]+)") or ""
    local filename = headers:match('filename%s*=%s*"([^"]*)"') or headers:match("filename%s*=%s*([^;%s]+)")
        or headers:match("filename%*%s*=%s*[%w-]*'[%w-]*'([^;%s]+)")
    local ctype = headers:match("content%-type%s*:%s*([^\r\n;]+)") or ""
    if filename then
        if c.upload and (paths.upload_name(decode.component(filename)) or paths.upload_type(ctype)
                or paths.upload_content(lower(content))) then
            return "malicious_upload"
        end
        local lname = lower(filename)
        local markup = find(ctype, "xml", 1, true) or find(ctype, "html", 1, true) or find(lname, "%.svg$")
            or find(lname, "%.x?html?$") or find(lname, "%.xml$")
        if c.xxe and markup and paths.xxe(lower(decode.wide_xml(content) or content)) then
            return "xxe"
        end
        if c.upload and markup and xss.detect(lower(content)) then
            -- an SVG or HTML file that runs script where it is served
            return "malicious_upload"
        end
        local hit = allowed ~= 0 and scan_value(c, band(allowed, bor(TRAV, SENS, SQL, XSS, CMD, CODE)), filename)
        return hit or nil
    end
    if allowed == 0 then
        return nil
    end
    return scan_value(c, allowed, name) or scan_value(c, allowed, content, name)
end

local function scan_xml(c, allowed, doc)
    if c.xxe and paths.xxe(lower(doc)) then
        return "xxe"
    end
    if allowed == 0 then
        return nil
    end
    local v, i, vi, gt = decode.xml_next(doc, 1, nil, nil)
    while v do
        local hit = scan_value(c, allowed, v)
        if hit then
            return hit
        end
        v, i, vi, gt = decode.xml_next(doc, i, vi, gt)
    end
    return nil
end

local function scan_json(c, allowed, doc)
    if allowed == 0 then
        return nil
    end
    local key
    local v, is_key, i = decode.json_next(doc, 1)
    while v do
        local hit = scan_value(c, allowed, v, not is_key and key or nil)
            or (c.xxe and find(v, "<!", 1, true) and paths.xxe(lower(v)) and "xxe") or nil
        if hit then
            return hit
        end
        if is_key then
            key = lower(v)
        end
        v, is_key, i = decode.json_next(doc, i)
    end
    return nil
end

local function scan_body(c)
    local data, over = read_body(c.limit)
    deep_left = math.huge
    if not data or data == "" then
        return nil
    end
    if over and c.refuse_oversize then
        return refuse(413)
    end
    data = decode_content(data, c.limit)
    if not data then
        return refuse(415)
    end
    local allowed = band(c.bits, SOURCE_BITS.BODY)
    local ct = lower(ngx.var.http_content_type or "")
    if find(ct, "multipart/", 1, true) then
        local boundary = ct:match('boundary%s*=%s*"([^"]+)"') or ct:match("boundary%s*=%s*([^;%s]+)")
        -- the boundary keeps its case
        local raw_ct = ngx.var.http_content_type or ""
        local bs = boundary and find(lower(raw_ct), boundary, 1, true)
        if bs then
            boundary = sub(raw_ct, bs, bs + #boundary - 1)
        end
        local delim = boundary and "--" .. boundary
        local p = delim and find(data, delim, 1, true)
        if p then
            local parts = 0
            while p do
                local headers, content, nextp = decode.multipart_next(data, delim, p)
                if not headers then
                    break
                end
                parts = parts + 1
                if parts > MAX_ARGS then
                    return "refuse"
                end
                local hit = multipart_field(c, allowed, headers, content)
                if hit then
                    return hit
                end
                p = nextp
            end
            return nil
        end
        -- not parseable: the whole body as text, line breaks being normal
        -- in it
        return scan_value(c, band(allowed, bit.bnot(CRLF)), data)
    end
    if find(ct, "application/x-www-form-urlencoded", 1, true) then
        local hit = scan_args(c, allowed, data)
        if hit or not c.xxe then
            return hit
        end
        local d = decode.component(data)
        return find(d, "<!", 1, true) and paths.xxe(lower(d)) and "xxe" or nil
    end
    local wide = decode.wide_xml(data)
    if wide then
        return scan_xml(c, allowed, wide)
    end
    if byte(data, 1) == 0xEF and byte(data, 2) == 0xBB and byte(data, 3) == 0xBF then
        data = sub(data, 4)
    end
    if find(ct, "xml", 1, true) or find(data, "^%s*<%?xml") then
        return scan_xml(c, allowed, data)
    end
    if find(ct, "json", 1, true) then
        return scan_json(c, allowed, data)
    end
    -- anything else: the text itself, and its strings if it is JSON
    local hit = (allowed ~= 0 and scan_value(c, allowed, data)) or nil
    if hit then
        return hit
    end
    if c.xxe and find(data, "<!", 1, true) and paths.xxe(lower(data)) then
        return "xxe"
    end
    if find(data, "^%s*[%[{]") then
        return scan_json(c, allowed, data)
    end
    return nil
end

local function scan_request(c)
    deep_left = DEEP_BUDGET
    local hit = scan_path(c)
    if hit then
        return hit
    end
    local allowed = band(c.bits, SOURCE_BITS.QUERY)
    if allowed ~= 0 then
        local raw = ngx.var.args
        if raw and raw ~= "" then
            hit = scan_args(c, allowed, raw)
            if hit then
                return hit
            end
        end
    end
    hit = scan_headers(c)
    if hit then
        return hit
    end
    if c.upload and ngx.req.get_method() == "PUT" and paths.upload_name(lower(ngx.var.uri or "")) then
        return "malicious_upload"
    end
    return scan_body(c)
end

-- Returns true when the request is clean, false on a hit.
function _M.check(config)
    local c = compiled[config] or _M.compile(config)
    if not c.any then
        return true
    end
    return scan_request(c) == nil
end

-- For tests and logs: the flag the request hits ("refuse" past a cap),
-- or nil.
function _M.verdict(config)
    local c = compiled[config] or _M.compile(config)
    if not c.any then
        return nil
    end
    return scan_request(c)
end

-- For tests: the flag that string s hits as a value of input set "PATH",
-- "QUERY" (one decoded argument), "HDR", "UA" or "BODY" under config's
-- enabled flags (name: its lower-cased parameter name), or false.
function _M.hits(config, set, s, name)
    local c = compiled[config] or _M.compile(config)
    deep_left = DEEP_BUDGET
    local allowed = band(c.bits, SOURCE_BITS[set] or 0)
    if allowed == 0 then
        return false
    end
    return scan_value(c, allowed, s, name) or false
end

return _M
