-- ua_check node (DATAPLANE 2.5): does the request's User-Agent pass?
--
-- compile(config) turns a node config into a checker once per worker (the
-- runtime calls it for every ua_check node when it loads the rules; a
-- config it has not seen is compiled on first use). check(config) then
-- classifies the trimmed, lower-cased User-Agent in one pass over it (both
-- tables at once) and applies the node's rules in the documented order.
--
-- Custom patterns are PCRE (ngx.re.find, "jo"), matched case-sensitively
-- and unanchored against the original User-Agent, as the server validates
-- them as regular expressions. A pattern PCRE cannot compile makes the node
-- an error, so requests reaching it fail closed.

local aho = require("waf.aho")
local bit = require("bit")

local ngx = ngx
local re_find = ngx.re.find
local band = bit.band
local bor = bit.bor
local lshift = bit.lshift
local assert = assert
local byte = string.byte
local lower = string.lower
local match = string.match
local ipairs = ipairs
local setmetatable = setmetatable
local tostring = tostring
local type = type

local _M = {}

local EMPTY = {}

-- The bytes Lua's %s matches: tab, LF, VT, FF, CR, space.
local SPACE = { [9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [32] = true }

-- s without leading and trailing white space. Byte tests first: the
-- pattern alone would be tried at every position of the string.
local function trim(s)
    if SPACE[byte(s, 1)] or SPACE[byte(s, -1)] then
        return match(s, "^%s*(.-)%s*$")
    end
    return s
end

-- Rules in priority order: the first rule with a token that is a substring
-- of the lower-cased User-Agent wins, unless the UA also contains one of the
-- rule's exclusions (then the next rule is tried).
local BROWSERS = {
    { label = "WeChat", tokens = { "micromessenger" } },
    { label = "Postman", tokens = { "postman" } },
    { label = "CLI", tokens = { "curl/", "wget/" } },
    { label = "Edge", tokens = { "edg/", "edgios/", "edga/" } },
    { label = "Opera", tokens = { "opr/", "opera" } },
    { label = "Firefox", tokens = { "firefox", "fxios" } },
    { label = "Chrome", tokens = { "crios", "chrome" }, exclude = { "chromium" } },
    { label = "Chromium", tokens = { "chromium" } },
    { label = "Safari", tokens = { "safari" } },
    { label = "Bot", tokens = { "bot", "spider", "crawler", "slurp" } },
}

local OSES = {
    { label = "Android", tokens = { "android" } },
    { label = "iOS", tokens = { "iphone", "ipad", "ipod", "ios" } },
    { label = "Windows", tokens = { "windows" } },
    { label = "macOS", tokens = { "mac os x", "macintosh", "macos" } },
    { label = "Chrome OS", tokens = { "cros" } },
    { label = "Linux", tokens = { "linux" } },
    { label = "Bot", tokens = { "bot", "spider", "crawler" } },
}

-- One Aho-Corasick automaton (waf/aho.lua) over the tokens and exclusions
-- of both tables, each token one bit (there are fewer than 32). A state's mask
-- holds the bits of the tokens ending there, its own and its suffixes'.
-- Scanning a string once ORs the masks of the states it passes: the set of
-- tokens it contains, overlapping ones included ("chrome" in "chromedg/").
local function build_automaton(tables)
    local bit_of, nbits = {}, 0
    local tokens = {}
    local function bit_for(tok)
        if not bit_of[tok] then
            bit_of[tok] = lshift(1, nbits)
            nbits = nbits + 1
            tokens[#tokens + 1] = tok
        end
        return bit_of[tok]
    end
    local ruled = {}
    for t, rules in ipairs(tables) do
        ruled[t] = {}
        for i, rule in ipairs(rules) do
            local m, x = 0, 0
            for _, tok in ipairs(rule.tokens) do
                m = bor(m, bit_for(tok))
            end
            for _, tok in ipairs(rule.exclude or EMPTY) do
                x = bor(x, bit_for(tok))
            end
            ruled[t][i] = { label = rule.label, tokens = m, exclude = x }
        end
    end
    assert(nbits <= 32, "ua classifier: more than 32 tokens")

    local a = aho.build(tokens)
    local mask = {}
    for st = 0, a.nstates - 1 do
        local m = 0
        for _, i in ipairs(a.out[st] or EMPTY) do
            m = bor(m, bit_of[tokens[i]])
        end
        mask[st] = m
    end
    return { cls = a.cls, ncls = a.ncls, delta = a.delta, mask = mask, browsers = ruled[1], oses = ruled[2] }
end

local AUTOMATON = build_automaton({ BROWSERS, OSES })

-- The label of the first rule with a token in seen and none of its
-- exclusions (an excluded rule falls through to the next one).
local function label(rules, seen)
    for _, r in ipairs(rules) do
        if band(seen, r.tokens) ~= 0 and band(seen, r.exclude) == 0 then
            return r.label
        end
    end
    return "Other"
end

-- The browser and OS labels of s (lower-cased, non-empty), in one pass.
local function classify(s)
    local a = AUTOMATON
    local cls, ncls, delta, mask = a.cls, a.ncls, a.delta, a.mask
    local st, seen = 0, 0
    for i = 1, #s do
        st = delta[st * ncls + cls[byte(s, i)]]
        local m = mask[st]
        if m ~= 0 then
            seen = bor(seen, m)
        end
    end
    return label(a.browsers, seen), label(a.oses, seen)
end

-- Exposed for tests: the browser and OS labels of a raw User-Agent.
function _M.classify(ua)
    local ual = lower(trim(ua or ""))
    if ual == "" then
        return "Unknown", "Unknown"
    end
    return classify(ual)
end

local function label_set(v)
    local set, any = {}, false
    if type(v) == "table" then
        for _, label in ipairs(v) do
            if type(label) == "string" then
                set[label] = true
                any = true
            end
        end
    end
    return any and set or nil
end

-- Compiled checkers per node config table (weak: they go with the rules).
local compiled = setmetatable({}, { __mode = "k" })

-- Compiles one node config. Returns the checker, or nil and why not.
function _M.compile(config)
    local c = compiled[config]
    if c then
        return c
    end
    c = {
        require_ua = config.require_ua == true,
        block_common_bots = config.block_common_bots == true,
        block_abnormal_ua = config.block_abnormal_ua == true,
        block_custom_ua = config.block_custom_ua == true,
        browsers = label_set(config.browsers),
        oses = label_set(config.operating_systems),
        and_mode = config.match_mode == "and",
        patterns = {},
    }
    if c.block_custom_ua and type(config.custom_ua_patterns) == "table" then
        for i, p in ipairs(config.custom_ua_patterns) do
            if type(p) == "string" and p ~= "" then
                -- Compiling (and caching) happens on the first call.
                local _, _, err = re_find("", p, "jo")
                if err then
                    c.err = "ua_check custom_ua_patterns[" .. i .. "] " .. p .. " is not a valid PCRE: " .. tostring(err)
                    break
                end
                c.patterns[#c.patterns + 1] = p
            end
        end
    end
    compiled[config] = c
    return c
end

-- Returns true when the request passes, false when it does not, or nil and
-- an error message (the runtime then fails closed).
function _M.check(config)
    local c = compiled[config] or _M.compile(config)
    if c.err then
        return nil, c.err
    end
    local ua = ngx.var.http_user_agent
    if type(ua) ~= "string" then
        ua = ""
    end
    ua = trim(ua)

    if c.require_ua and ua == "" then
        return false
    end

    local browser, os
    if c.block_common_bots or c.block_abnormal_ua or c.browsers or c.oses then
        if ua == "" then
            browser, os = "Unknown", "Unknown"
        else
            local ual = lower(ua)
            browser, os = classify(ual)
        end
    end

    if c.block_common_bots and (browser == "Bot" or os == "Bot") then
        return false
    end
    if c.block_abnormal_ua and (browser == "Other" or browser == "Unknown") then
        return false
    end
    if c.block_custom_ua then
        for _, p in ipairs(c.patterns) do
            local from, _, err = re_find(ua, p, "jo")
            if from then
                return false
            end
            if err then
                return nil, "ua_check custom pattern " .. p .. ": " .. tostring(err)
            end
        end
    end

    local b, o = c.browsers, c.oses
    if not b and not o then
        return true
    end
    if not o then
        return b[browser] == true
    end
    if not b then
        return o[os] == true
    end
    if c.and_mode then
        return b[browser] == true and o[os] == true
    end
    return b[browser] == true or o[os] == true
end

return _M
