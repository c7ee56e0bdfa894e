-- Cross-site scripting detection for security_check: what a browser would
-- run if the input were echoed into a page, an attribute or a script.
--
--   * a tag: a script-capable element (<script, <iframe, <svg, ...), or any
--     element with an event-handler attribute (<img src=x onerror =alert(1)>,
--     <svg/onload=...>), a script URL in an attribute, a CSS expression or
--     an HTML document in srcdoc;
--   * an event handler without a tag, breaking out of an attribute value
--     (" onmouseover="alert(1));
--   * a script URL (javascript:, vbscript:, data:text/html) where a URL
--     starts, after HTML character references are decoded and the tabs and
--     newlines browsers drop from URLs removed (javascript&colon;,
--     jav&#x09;ascript:);
--   * script call shapes: alert(1), eval(...), document.cookie,
--     constructor.constructor(...), CSS expression(...).
--
-- The tag walk resumes where each tag ended, and every other rule is a
-- forward search: linear in the input.

local byte = string.byte
local char = string.char
local find = string.find
local gsub = string.gsub
local lower = string.lower
local sub = string.sub
local band = require("bit").band
local floor = math.floor
local ipairs = ipairs
local tonumber = tonumber

local lists = require("waf.lists")

local _M = {}

local byteset = require("waf.lists").byteset

-- Elements that run script or load a document whatever their attributes.
local DANGEROUS_TAGS = {
    script = true, iframe = true, frame = true, frameset = true, object = true, embed = true, applet = true,
    base = true, meta = true, svg = true, math = true, isindex = true, xml = true, import = true,
    vmlframe = true, style = true, link = true, xss = true, handler = true, listener = true, animate = true,
    set = true,
}

-- Named character references that matter for the rules (the characters
-- of scripts and URLs); others stay as written.
local ENTITIES = {
    colon = ":", lpar = "(", rpar = ")", lt = "<", gt = ">", quot = '"', apos = "'", amp = "&", tab = "\t",
    newline = "\n", nbsp = " ", sol = "/", bsol = "\\", semi = ";", comma = ",", period = ".", excl = "!",
    equals = "=", grave = "`", lsqb = "[", rsqb = "]", lbrack = "[", rbrack = "]", lcub = "{", rcub = "}",
    num = "#", percnt = "%", plus = "+", dollar = "$", ast = "*", quest = "?", lowbar = "_", hyphen = "-",
    dash = "-", verbar = "|", vert = "|",
}

local function utf8(c)
    if c < 0x80 then
        return char(c)
    elseif c < 0x800 then
        return char(0xC0 + floor(c / 64), 0x80 + c % 64)
    elseif c < 0x10000 then
        return char(0xE0 + floor(c / 4096), 0x80 + floor(c / 64) % 64, 0x80 + c % 64)
    elseif c < 0x110000 then
        return char(0xF0 + floor(c / 262144), 0x80 + floor(c / 4096) % 64, 0x80 + floor(c / 64) % 64,
            0x80 + c % 64)
    end
    return "?"
end
_M.utf8 = utf8

local function numeric(digits, base)
    local c = tonumber(digits, base)
    if not c then
        return nil
    end
    return utf8(c)
end

local function from_hex_ref(h)
    return numeric(h, 16)
end

local function from_decimal_ref(d)
    return numeric(d, 10)
end

local function from_named_ref(name)
    return ENTITIES[lower(name)]
end

-- s with HTML character references decoded, with or without their ';'
-- (browsers accept both in attribute values), leading zeros allowed.
function _M.unescape_html(s)
    if not find(s, "&", 1, true) then
        return s
    end
    s = gsub(s, "&#[xX]0*(%x%x?%x?%x?%x?%x?);?", from_hex_ref)
    s = gsub(s, "&#0*(%d%d?%d?%d?%d?%d?%d?);?", from_decimal_ref)
    return (gsub(s, "&(%a%a%a?%a?%a?%a?%a?);?", from_named_ref))
end

-- Tabs, newlines and other controls browsers drop inside URLs.
local function squeeze(s)
    for i = 1, #s do
        if byte(s, i) < 32 then
            return (gsub(s, "[%z\1-\31]", ""))
        end
    end
    return s
end

local SEP = byteset({ 9, 10, 12, 13, 32, 47, 11, 0 })
local NAME_END = byteset({ 9, 10, 12, 13, 32, 47, 62, 61, 11, 0 })

-- Is a URL that runs script at s[i]? (s lower-cased, entities decoded, no
-- controls.)
local function script_url(s, i)
    while byte(s, i) == 32 do
        i = i + 1
    end
    local b = byte(s, i)
    if b == 106 or b == 118 or b == 108 then -- j v l
        local e
        if sub(s, i, i + 10) == "javascript:" then
            e = i + 11
        elseif sub(s, i, i + 8) == "vbscript:" then
            e = i + 9
        elseif sub(s, i, i + 10) == "livescript:" then
            e = i + 11
        end
        if e then
            -- Something to run (not javascript:void(0), a no-op link).
            local rest = sub(s, e, e + 8)
            return find(rest, "[^%s]") ~= nil and rest ~= "void(0)" and sub(rest, 1, 7) ~= "void(0)"
        end
    elseif b == 100 and sub(s, i, i + 4) == "data:" then
        local j = i + 5
        while byte(s, j) == 32 do
            j = j + 1
        end
        local mt = sub(s, j, j + 20)
        return find(mt, "^text/html") ~= nil or find(mt, "^image/svg") ~= nil or find(mt, "^application/x?h?t?m?l?%+?xml") ~= nil
            or find(mt, "^text/javascript") ~= nil or find(mt, "^application/javascript") ~= nil
            or find(mt, "^text/xml") ~= nil or find(mt, "^application/x%-shockwave") ~= nil
    end
    return false
end

-- Characters after which a URL can start in markup or CSS.
local URL_START = byteset({ 61, 34, 39, 96, 40, 44, 60, 62, 59, 91, 123 })

-- Script URLs anywhere a URL can start: the input's start, or after one of
-- = " ' ` ( , < > ; [ { with optional spaces.
local SCHEMES = { "script:", "data:" }
local function has_script_url(s)
    if script_url(s, 1) then
        return true
    end
    for _, tail in ipairs(SCHEMES) do
        local init = 1
        while true do
            local p = find(s, tail, init, true)
            if not p then
                break
            end
            init = p + 1
            local start = p
            if tail == "script:" then
                -- back to the scheme's first letter
                local b3 = sub(s, p - 4, p - 1)
                if b3 == "java" or b3 == "vesc" then
                    start = p - 4
                elseif sub(s, p - 2, p - 1) == "vb" then
                    start = p - 2
                else
                    start = nil
                end
                if start and sub(s, start - 4, start - 1) == "live" then
                    start = start - 4
                end
            end
            if start and start > 1 then
                local j = start - 1
                while j > 1 and byte(s, j) == 32 and j > start - 8 do
                    j = j - 1
                end
                if URL_START[byte(s, j)] and script_url(s, start) then
                    return true
                end
            end
        end
    end
    return false
end

-- The end of an attribute value starting at i (its quote, if any, opens
-- it), and the value.
local function attr_value(s, i, len)
    local q = byte(s, i)
    if q == 34 or q == 39 or q == 96 then
        local e = find(s, char(q), i + 1, true)
        if not e then
            return len + 1, sub(s, i + 1)
        end
        return e + 1, sub(s, i + 1, e - 1)
    end
    local e = i
    while e <= len do
        local b = byte(s, e)
        if b == 62 or b == 32 or b == 9 or b == 10 or b == 13 or b == 12 or b == 11 then
            return e, sub(s, i, e - 1)
        end
        e = e + 1
    end
    return len + 1, sub(s, i)
end

local ATTR_URL = { href = true, src = true, action = true, formaction = true, data = true, ["xlink:href"] = true,
    background = true, dynsrc = true, lowsrc = true, poster = true, codebase = true, code = true, to = true,
    values = true, from = true, by = true, folder = true, content = true, srcset = true, style = true,
    srcdoc = true }

local function from_css_escape(h)
    return utf8(tonumber(h, 16))
end

-- CSS escapes (\28 is "(") decoded, for style values.
local function unescape_css(s)
    if not find(s, "\\", 1, true) then
        return s
    end
    return (gsub(s, "\\0*(%x%x?%x?%x?)%s?", from_css_escape))
end

-- Attributes that are script or data binding whatever their value.
local BAD_ATTRS = { datasrc = true, datafld = true, dataformatas = true, xmlns = true }

-- A style value that loads or runs something.
local function bad_style(u)
    if find(u, "{", 1, true) or find(u, "}", 1, true) or find(u, "[", 1, true) or find(u, "\\", 1, true) then
        -- breaking out of the declaration, or CSS escapes
        return true
    end
    u = unescape_css(u)
    return find(u, "expression", 1, true) or find(u, "script:", 1, true) or find(u, "-moz-binding", 1, true)
        or find(u, "behavio", 1, true) or find(u, "binding", 1, true) or find(u, "url%s*%(") or find(u, "import", 1, true)
end

local ALPHA = byteset()
for b = 97, 122 do
    ALPHA[b] = true
end

-- onerror, onload, onmouseover...: "on" and a letter.
local function handler_name(attr)
    return byte(attr, 1) == 111 and byte(attr, 2) == 110 and ALPHA[byte(attr, 3)] == true
end

-- The tag starting at s[i] ('<'): returns its end and whether it is XSS.
local function tag(s, i, len)
    local j = i + 1
    local b = byte(s, j)
    if b == 63 or b == 33 then
        -- <?import, <?xml-stylesheet, <!ENTITY, <!DOCTYPE x [
        local w = sub(s, j + 1, j + 8)
        if (b == 63 and find(w, "^%a")) or find(w, "^entity") or (find(w, "^doctype") and find(s, "[", j, true)) then
            return j + 1, true
        end
        return j, false
    end
    if not b or b < 97 or b > 122 then
        return i + 1, false
    end
    local k = j
    while k <= len and not NAME_END[byte(s, k)] and byte(s, k) ~= 60 do
        k = k + 1
    end
    local name = sub(s, j, k - 1)
    local colon = find(name, ":", 1, true)
    if DANGEROUS_TAGS[name] or (colon and (DANGEROUS_TAGS[sub(name, colon + 1)] or DANGEROUS_TAGS[sub(name, 1, colon - 1)]
            or sub(name, 1, colon - 1) == "xsl")) then
        return k, true
    end
    -- Attributes until '>' (or the end: the page's own markup closes it).
    local guard = 0
    while k <= len and guard < 256 do
        guard = guard + 1
        while SEP[byte(s, k)] do
            k = k + 1
        end
        b = byte(s, k)
        if not b or b == 62 or b == 60 then
            return k, false
        end
        local a = k
        while k <= len and not NAME_END[byte(s, k)] do
            k = k + 1
        end
        local attr = sub(s, a, k - 1)
        if BAD_ATTRS[attr] or sub(attr, 1, 6) == "xmlns:" then
            return k, true
        end
        while byte(s, k) == 32 or byte(s, k) == 9 or byte(s, k) == 10 or byte(s, k) == 13 or byte(s, k) == 12 do
            k = k + 1
        end
        if byte(s, k) == 61 then
            k = k + 1
            while byte(s, k) == 32 or byte(s, k) == 9 or byte(s, k) == 10 or byte(s, k) == 13 or byte(s, k) == 12 do
                k = k + 1
            end
            local v
            k, v = attr_value(s, k, len)
            if handler_name(attr) then
                return k, true
            end
            if ATTR_URL[attr] then
                if sub(v, 1, 2) == "&#" then
                    return k, true -- a URL written in character references
                end
                local u = squeeze(_M.unescape_html(v))
                if script_url(u, 1) or (attr == "style" and bad_style(u)) or (attr == "srcdoc" and find(u, "<", 1, true)) then
                    return k, true
                end
            end
        end
    end
    return k, false
end

-- Where an attribute can start outside a tag: after white space, a quote
-- or a slash closing the previous value, and similar.
local HANDLER_BEFORE = byteset({ 32, 9, 10, 13, 12, 11, 34, 39, 96, 47, 59, 44, 40, 43, 0 })

-- onxxx= outside a tag, breaking out of an attribute value.
local function loose_handler(s)
    local init = 1
    while true do
        local p = find(s, "on", init, true)
        if not p then
            return false
        end
        local e = p + 1
        while ALPHA[byte(s, e + 1)] do
            e = e + 1
        end
        init = e + 1
        if e - p >= 4 and (p == 1 or HANDLER_BEFORE[byte(s, p - 1)]) then
            local k = e + 1
            while byte(s, k) == 32 or byte(s, k) == 9 or byte(s, k) == 10 or byte(s, k) == 13 or byte(s, k) == 12 do
                k = k + 1
            end
            if byte(s, k) == 61 and byte(s, k + 1) ~= 61 then
                -- A value follows (onload=foo at the very start is not yet
                -- enough: it needs script-like bytes).
                if p > 1 or find(s, "(", k + 1, true) or find(s, "`", k + 1, true) or find(s, ";", k + 1, true)
                        or find(s, "'", k + 1, true) or find(s, '"', k + 1, true) then
                    return true
                end
            end
        end
    end
end

-- Script sinks that are called: the name, then optional white space, then
-- "(" with an argument or a template literal.
local CALLS = { "alert", "prompt", "confirm", "eval", "settimeout", "setinterval", "execscript", "fromcharcode",
    "constructor", "msgbox", "import" }
local IDENT = byteset()
for b = 48, 57 do
    IDENT[b] = true
end
for b = 97, 122 do
    IDENT[b] = true
end
IDENT[95], IDENT[36] = true, true

local CALL_LIST = lists.new(CALLS)
local SINKS = lists.new({ "document", "innerhtml", "window", "expression" })
local MAX_MATCHES = 4096

local function script_call(s)
    local n = lists.each(CALL_LIST, s, MAX_MATCHES)
    for m = 1, n do
        local p = lists.AT[m]
        if not IDENT[byte(s, p - 1) or 0] then
            local k = p + #CALLS[lists.WORD[m]]
            local spaced = false
            while byte(s, k) == 32 or byte(s, k) == 9 or byte(s, k) == 10 or byte(s, k) == 13 do
                k = k + 1
                spaced = true
            end
            local b = byte(s, k)
            if b == 96 and not spaced then
                return true
            end
            if b == 40 then
                local a = byte(s, k + 1)
                -- alert(1), alert`1`; not alert() nor prose "(see)"
                if a and a ~= 41 and (not spaced or not IDENT[a]) then
                    return true
                end
            end
        end
    end
    if not lists.first(SINKS, s) then
        return false
    end
    if find(s, "document", 1, true) and (find(s, "document%s*%.%s*cookie") or find(s, "document%s*%.%s*write")
            or find(s, "document%s*%.%s*domain")) then
        return true
    end
    if find(s, "innerhtml", 1, true) and find(s, "%.%s*innerhtml%s*=") then
        return true
    end
    if find(s, "window", 1, true) and find(s, "window%s*%[") then
        return true
    end
    return find(s, "expression", 1, true) ~= nil and find(unescape_css(s), "expression%s*%(") ~= nil
end

-- The rules, for detect's parts: tags, event handlers outside tags,
-- script URLs, script calls.
local TAG, HANDLER, URL, CALL = 1, 2, 4, 8
local ALL = 15

local detect

-- Returns a reason when the lower-cased s is cross-site scripting. parts
-- (default all) names the rules to run: a caller that knows s lacks a
-- rule's tokens leaves it out.
function _M.detect(s, parts)
    parts = parts or ALL
    if find(s, "\0", 1, true) then
        -- Old browsers skip a NUL (<scr\0ipt>) or take it for a space
        -- (<object\0data=...>).
        return detect((gsub(s, "%z", "")), ALL) or detect((gsub(s, "%z", " ")), ALL)
    end
    return detect(s, parts)
end

local function tags(s)
    local len = #s
    local p = find(s, "<", 1, true)
    while p do
        local e, bad = tag(s, p, len)
        if bad then
            return true
        end
        if e <= p then
            e = p + 1
        end
        -- the next "<" right there (a run of them) needs no search
        if byte(s, e) == 60 then
            p = e
        else
            p = find(s, "<", e, true)
        end
    end
    return false
end

detect = function(s, parts)
    if band(parts, TAG) ~= 0 and find(s, "<", 1, true) and tags(s) then
        return "tag"
    end
    if band(parts, HANDLER) ~= 0 and loose_handler(s) then
        return "event handler"
    end
    if band(parts, URL + CALL + TAG) == 0 then
        return nil
    end
    local u = squeeze(_M.unescape_html(s))
    if band(parts, URL) ~= 0 and has_script_url(u) then
        return "script url"
    end
    -- &lt;script&gt; decoded by a page that unescapes once
    if band(parts, TAG) ~= 0 and u ~= s and find(u, "<", 1, true) and not find(s, "<", 1, true) and tags(u) then
        return "encoded tag"
    end
    if band(parts, CALL) ~= 0 and script_call(u) then
        return "script call"
    end
    return nil
end

return _M
