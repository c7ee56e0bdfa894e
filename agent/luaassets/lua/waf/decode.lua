-- Decoders for security_check: each turns an input into what some layer
-- behind the WAF will see, in one pass over its bytes, with its output
-- bounded by its input (inflate: by the caller's limit).

local ffi = require("ffi")
local xss = require("waf.xss")

local ngx = ngx
local byte = string.byte
local char = string.char
local concat = table.concat
local find = string.find
local gsub = string.gsub
local lower = string.lower
local sub = string.sub
local ipairs = ipairs
local pcall = pcall
local select = select
local tonumber = tonumber
local type = type

local utf8 = xss.utf8

local _M = {}

-- The bytes percent_u, component and fold look for: "%", "+" and the
-- lead bytes of what fold rewrites.
local DECODABLE = ffi.new("uint8_t[256]")
DECODABLE[37], DECODABLE[43] = 1, 1
for b = 192, 239 do
    DECODABLE[b] = 1
end
local u8 = ffi.typeof("const uint8_t *")

-- Whether no decoder here changes s. One table load a byte: the search
-- with a pattern class it replaces cost ten times that, and ran on every
-- value scanned.
function _M.plain(s)
    local p = ffi.cast(u8, s)
    for i = 0, #s - 1 do
        if DECODABLE[p[i]] ~= 0 then
            return false
        end
    end
    return true
end

-- %XX and "+" (a query or form component).
function _M.component(s)
    if find(s, "%", 1, true) or find(s, "+", 1, true) then
        return ngx.unescape_uri(s)
    end
    return s
end

-- %XX only: a path keeps its "+".
function _M.path(s)
    if find(s, "%", 1, true) then
        if find(s, "+", 1, true) then
            local kept = gsub(s, "%+", "%%2B")
            return ngx.unescape_uri(kept)
        end
        return ngx.unescape_uri(s)
    end
    return s
end

-- IIS's %uXXXX, with full-width ASCII (U+FF01-FF5E) mapped to ASCII the
-- way its best-fit conversion does.
-- Slashes that best-fit conversions turn into "/" and "\".
local BEST_FIT = { [0x2215] = "/", [0x2044] = "/", [0x2216] = "\\", [0x29F5] = "\\", [0x3002] = "." }

local function from_percent_u(h)
    local c = tonumber(h, 16)
    if c >= 0xFF01 and c <= 0xFF5E then
        return char(c - 0xFEE0)
    end
    return BEST_FIT[c] or utf8(c)
end

function _M.percent_u(s)
    if not (find(s, "%u", 1, true) or find(s, "%U", 1, true)) or not find(s, "%%[uU]%x%x%x%x") then
        return s
    end
    return (gsub(s, "%%[uU](%x%x%x%x)", from_percent_u))
end

local function from_overlong2(c)
    local b1, b2 = byte(c, 1, 2)
    return char((b1 % 32) * 64 + b2 % 64)
end

local function from_overlong3(c)
    local _, b2, b3 = byte(c, 1, 3)
    return char((b2 % 64) * 64 + b3 % 64)
end

local function from_low_byte(b)
    return char(byte(b) - 128)
end

local function from_circled(b)
    return char(byte(b) - 160 + 49)
end

local function from_fullwidth(a, b)
    local c = (byte(a) == 188 and 0xFF00 or 0xFF40) + byte(b) - 128
    if c >= 0xFF01 and c <= 0xFF5E then
        return char(c - 0xFEE0)
    end
end

-- Overlong UTF-8 (%c0%af is "/", %e0%80%ae is ".") and full-width ASCII
-- (U+FF0E is "."), as lenient decoders read them.
function _M.fold(s)
    if not (find(s, "\192", 1, true) or find(s, "\193", 1, true) or find(s, "\224", 1, true)
            or find(s, "\239", 1, true) or find(s, "\226", 1, true) or find(s, "\227", 1, true)
            or find(s, "\229\152", 1, true) or find(s, "\196", 1, true)) then
        return s
    end
    s = gsub(s, "[\192\193][\128-\191]", from_overlong2)
    s = gsub(s, "\224[\128-\129][\128-\191]", from_overlong3)
    -- U+560A/U+560D and U+010A/U+010D: a server that keeps the low byte
    -- of each character reads LF and CR
    s = gsub(s, "\229\152([\138\141])", from_low_byte)
    s = gsub(s, "\196([\138\141])", from_low_byte)
    -- circled digits and the ideographic full stop, as IDNA maps them
    s = gsub(s, "\226\145([\160-\168])", from_circled)
    s = gsub(s, "\226\147\170", "0")
    s = gsub(s, "\227\128\130", ".")
    return (gsub(s, "\239([\188\189])([\128-\191])", from_fullwidth))
end

local JSON_ESCAPES = { [98] = "\b", [102] = "\f", [110] = "\n", [114] = "\r", [116] = "\t", [34] = '"', [92] = "\\",
    [47] = "/" }

-- The JSON string whose opening quote is at i, decoded (\n, \uXXXX with
-- surrogate pairs). Returns it and the index after its closing quote (the
-- end of s + 1 when it is not closed).
local function json_string(s, i)
    local parts, n = nil, 0
    local j = i + 1
    while true do
        local k = find(s, '["\\]', j)
        if not k then
            local rest = sub(s, j)
            if not parts then
                return rest, #s + 1
            end
            n = n + 1
            parts[n] = rest
            return concat(parts, "", 1, n), #s + 1
        end
        if byte(s, k) == 34 then
            if not parts then
                return sub(s, i + 1, k - 1), k + 1
            end
            n = n + 1
            parts[n] = sub(s, j, k - 1)
            return concat(parts, "", 1, n), k + 1
        end
        parts = parts or {}
        n = n + 1
        parts[n] = sub(s, j, k - 1)
        local e = byte(s, k + 1)
        if e == 117 then -- \uXXXX
            local c = tonumber(sub(s, k + 2, k + 5), 16)
            local len = 6
            if c and c >= 0xD800 and c <= 0xDBFF and sub(s, k + 6, k + 7) == "\\u" then
                local lo = tonumber(sub(s, k + 8, k + 11), 16)
                if lo and lo >= 0xDC00 and lo <= 0xDFFF then
                    c = 0x10000 + (c - 0xD800) * 1024 + (lo - 0xDC00)
                    len = 12
                end
            end
            n = n + 1
            parts[n] = c and utf8(c) or "\\u"
            j = k + (c and len or 2)
        else
            n = n + 1
            parts[n] = JSON_ESCAPES[e] or (e and char(e) or "")
            j = k + 2
        end
    end
end

-- The next string of a JSON text from index i (keys and values),
-- decoded: the string, whether it is a key (a ":" follows it) and where
-- to go on; nil at the end. The scan never recurses: nesting costs
-- nothing, and a text that is not JSON yields whatever strings it has.
function _M.json_next(s, i)
    local q = find(s, '"', i, true)
    if not q then
        return nil
    end
    local str, nexti = json_string(s, q)
    local j = nexti
    local b = byte(s, j)
    while b == 32 or b == 9 or b == 10 or b == 13 do
        j = j + 1
        b = byte(s, j)
    end
    return str, b == 58, nexti
end

-- Text of an XML document in UTF-16 or UTF-32 (by its byte-order mark or
-- by how "<" is spelled at its start) as UTF-8; nil when it is neither.
local function transcode(s, unit, big)
    local p = ffi.cast(u8, s)
    local len = #s - #s % unit
    local out, n = {}, 0
    local i = 0
    local run = {}
    local rn = 0
    while i < len do
        local c
        if unit == 2 then
            c = big and p[i] * 256 + p[i + 1] or p[i + 1] * 256 + p[i]
        else
            c = big and ((p[i] * 256 + p[i + 1]) * 256 + p[i + 2]) * 256 + p[i + 3]
                or ((p[i + 3] * 256 + p[i + 2]) * 256 + p[i + 1]) * 256 + p[i]
        end
        rn = rn + 1
        run[rn] = c < 0x80 and char(c) or utf8(c)
        if rn == 4096 then
            n = n + 1
            out[n] = concat(run, "", 1, rn)
            rn = 0
        end
        i = i + unit
    end
    n = n + 1
    out[n] = concat(run, "", 1, rn)
    return concat(out, "", 1, n)
end

function _M.wide_xml(s)
    local b1, b2, b3, b4 = byte(s, 1, 4)
    if b1 == 0xFF and b2 == 0xFE and b3 == 0 and b4 == 0 then
        return transcode(sub(s, 5), 4, false)
    elseif b1 == 0 and b2 == 0 and b3 == 0xFE and b4 == 0xFF then
        return transcode(sub(s, 5), 4, true)
    elseif b1 == 0xFF and b2 == 0xFE then
        return transcode(sub(s, 3), 2, false)
    elseif b1 == 0xFE and b2 == 0xFF then
        return transcode(sub(s, 3), 2, true)
    elseif b1 == 60 and b2 == 0 and b3 == 0 and b4 == 0 then
        return transcode(s, 4, false)
    elseif b1 == 0 and b2 == 0 and b3 == 0 and b4 == 60 then
        return transcode(s, 4, true)
    elseif b1 == 60 and b2 == 0 then
        return transcode(s, 2, false)
    elseif b1 == 0 and b2 == 60 then
        return transcode(s, 2, true)
    end
    return nil
end

-- zlib, which nginx itself links (ngx_http_gzip_module): through the
-- process's own symbols, else the shared library.
local zlib
do
    local ok = pcall(ffi.cdef, [[
        typedef struct openflare_z_stream {
            const unsigned char *next_in; unsigned int avail_in; unsigned long total_in;
            unsigned char *next_out; unsigned int avail_out; unsigned long total_out;
            const char *msg; void *state; void *zalloc; void *zfree; void *opaque;
            int data_type; unsigned long adler; unsigned long reserved;
        } openflare_z_stream;
        int inflateInit2_(openflare_z_stream *strm, int windowBits, const char *version, int stream_size);
        int inflate(openflare_z_stream *strm, int flush);
        int inflateEnd(openflare_z_stream *strm);
        int inflateReset(openflare_z_stream *strm);
        const char *zlibVersion(void);
    ]])
    if ok then
        for _, lib in ipairs({ false, "z", "libz.so.1" }) do
            local l = lib == false and ffi.C or select(2, pcall(ffi.load, lib))
            if type(l) ~= "string" and l and pcall(function()
                return l.inflateInit2_ ~= nil and l.zlibVersion ~= nil
            end) then
                zlib = l
                break
            end
        end
    end
end

-- Whether gzip and deflate bodies can be decoded here.
_M.inflate_available = zlib ~= nil

local Z_OK, Z_STREAM_END, Z_BUF_ERROR = 0, 1, -5
local CHUNK = 16384

-- The first limit bytes that data (gzip, zlib or raw deflate; wbits as
-- zlib's windowBits) inflates to, and whether it ended cleanly within them.
-- nil plus a reason when it is not a valid stream.
local function inflate(data, limit, wbits)
    local strm = ffi.new("openflare_z_stream")
    if zlib.inflateInit2_(strm, wbits, zlib.zlibVersion(), ffi.sizeof(strm)) ~= Z_OK then
        return nil, "inflateInit2 failed"
    end
    ffi.gc(strm, zlib.inflateEnd)
    local input = data
    strm.next_in = ffi.cast("const unsigned char *", input)
    strm.avail_in = #input
    local buf = ffi.new("unsigned char[?]", CHUNK)
    local out, n, total = {}, 0, 0
    while total < limit do
        strm.next_out = buf
        strm.avail_out = CHUNK
        local rc = zlib.inflate(strm, 0)
        local got = CHUNK - strm.avail_out
        if got > 0 then
            n = n + 1
            out[n] = ffi.string(buf, got)
            total = total + got
        end
        if rc == Z_STREAM_END then
            if strm.avail_in == 0 then
                break
            end
            -- another gzip member
            if zlib.inflateReset(strm) ~= Z_OK then
                return nil, "bad stream"
            end
        elseif rc == Z_BUF_ERROR then
            -- no more input: a truncated (over-limit) body
            break
        elseif rc ~= Z_OK then
            return nil, "bad stream"
        end
    end
    local s = concat(out, "", 1, n)
    if #s > limit then
        s = sub(s, 1, limit)
    end
    return s
end

-- Decodes one Content-Encoding ("gzip", "x-gzip", "deflate"). nil plus a
-- reason for any other coding or a corrupt stream.
function _M.inflate(data, coding, limit)
    if not zlib then
        return nil, "zlib unavailable"
    end
    if coding == "gzip" or coding == "x-gzip" then
        return inflate(data, limit, 31)
    elseif coding == "deflate" then
        -- zlib-wrapped as RFC 9110 says, or raw as some clients send it
        local s = inflate(data, limit, 15)
        if s then
            return s
        end
        return inflate(data, limit, -15)
    end
    return nil, "unsupported coding " .. coding
end

local function only_space(s, i, j)
    for k = i, j do
        local b = byte(s, k)
        if b ~= 32 and b ~= 9 and b ~= 10 and b ~= 13 then
            return false
        end
    end
    return true
end

-- The next text node, CDATA section or attribute value of an XML
-- document from index i, character references decoded, and where to go
-- on; nil at the end. Comments and declarations are skipped. A tag's
-- attribute values come one at a time: vi is the position inside the tag
-- and gt the tag's end, both searched for once per tag.
function _M.xml_next(doc, i, vi, gt)
    local unescape = xss.unescape_html
    local len = #doc
    while i <= len do
        if vi then
            -- inside a tag: its next ="value" or ='value'
            local eq = nil
            for k = vi, gt - 1 do
                if byte(doc, k) == 61 then
                    eq = k
                    break
                end
            end
            if eq then
                local k = eq + 1
                while byte(doc, k) == 32 or byte(doc, k) == 9 or byte(doc, k) == 10 or byte(doc, k) == 13 do
                    k = k + 1
                end
                local q = byte(doc, k)
                if q == 34 or q == 39 then
                    local e = find(doc, q == 34 and '"' or "'", k + 1, true) or len + 1
                    if e < gt then
                        return unescape(sub(doc, k + 1, e - 1)), i, e + 1, gt
                    end
                    -- a ">" inside the value: the tag ends after it
                    local after = find(doc, ">", e + 1, true) or len + 1
                    return unescape(sub(doc, k + 1, e - 1)), after + 1, nil, nil
                end
                vi = k
            else
                i, vi = gt + 1, nil
            end
        else
            local lt = find(doc, "<", i, true)
            local e = (lt or len + 1) - 1
            if lt and sub(doc, lt, lt + 8) == "<![CDATA[" then
                local ce = find(doc, "]]>", lt + 9, true)
                if e >= i and not only_space(doc, i, e) then
                    return unescape(sub(doc, i, e)), lt, nil, nil
                end
                return sub(doc, lt + 9, (ce or len + 1) - 1), ce and ce + 3 or len + 1, nil, nil
            end
            if e >= i and not only_space(doc, i, e) then
                return unescape(sub(doc, i, e)), lt or len + 1, nil, nil
            end
            if not lt then
                return nil
            end
            if sub(doc, lt, lt + 3) == "<!--" then
                local ce = find(doc, "-->", lt + 4, true)
                i = ce and ce + 3 or len + 1
            else
                i, vi, gt = lt + 1, lt + 1, find(doc, ">", lt + 1, true) or len + 1
            end
        end
    end
    return nil
end

-- The part of a multipart body after the delimiter at p (delim is
-- "--" .. boundary): its headers (lower-cased, the block before the blank
-- line), its content and the next delimiter's position (nil after the
-- last part). nil when there is no part at p. Every search starts where
-- the previous one ended, within its part.
function _M.multipart_next(body, delim, p)
    local start = p + #delim
    if sub(body, start, start + 1) == "--" then
        return nil
    end
    local nextp = find(body, delim, start, true)
    local region = sub(body, start, (nextp or #body + 1) - 1)
    local hs = find(region, "\n", 1, true) or #region
    local he = find(region, "\n\r\n", hs, true) or find(region, "\n\n", hs, true)
    local headers, content
    if he then
        headers = lower(sub(region, hs + 1, he))
        local c = he + 1
        if byte(region, c) == 13 then
            c = c + 1
        end
        content = sub(region, c + 1)
    else
        headers, content = lower(sub(region, hs + 1)), ""
    end
    -- the line break before the next delimiter belongs to it
    if nextp then
        local n = #content
        if byte(content, n) == 10 then
            n = n - 1
            if byte(content, n) == 13 then
                n = n - 1
            end
            content = sub(content, 1, n)
        end
    end
    return headers, content, nextp
end

return _M
