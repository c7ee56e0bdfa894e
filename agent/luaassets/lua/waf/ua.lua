-- ua_check node (DATAPLANE 2.5): does the request's User-Agent pass?
--
-- compile(config) turns a node config into a checker once per worker (the
-- runtime calls it for every ua_check node when it loads the rules; a
-- config it has not seen is compiled on first use). check(config, req)
-- then applies the node's rules in the documented order to the trimmed
-- User-Agent and its labels, which are worked out once per request, in one
-- pass over the UA (both tables at once), and kept in req, the walk's
-- per-request table, for every other ua_check node the request reaches.
--
-- Custom patterns are Go regexps (the server validates them as such),
-- matched case-sensitively and unanchored against the trimmed User-Agent by
-- waf/regex.lua, which gives Go's answer in time linear in the UA: the
-- node's patterns share one automaton, so they cost one pass over it. A
-- pattern that engine does not take (Unicode classes such as \p{Greek},
-- (?i) on most non-ASCII letters, an automaton over its size cap) runs on
-- PCRE (ngx.re.find, "jo") as before, logged once per worker and load; one
-- that neither compiles makes the node an error, so requests reaching it
-- fail closed.
--
-- What a request costs is bounded whatever its User-Agent (nginx takes
-- header lines of up to 16 KB with the rendered config): trimming and
-- classifying take a fixed number of steps per byte; the automaton one
-- table read per character once its cache holds the way (3.6 ns a byte
-- with the JIT), and one pass over the NFA for each step it has not cached
-- (2 to 4 us for block-list patterns; up to 50 us for one of a thousand
-- NFA states kept live at once), at most MAX_MATCHED_UA of those and
-- MAX_MATCH_WORK of work per request. The PCRE patterns, at most
-- MAX_PATTERNS of them, run under a match limit against User-Agents of at
-- most MAX_MATCHED_UA bytes.

local aho = require("waf.aho")
local regex = require("waf.regex")
local bit = require("bit")

local ngx = ngx
local re_find = ngx.re.find
local band = bit.band
local bor = bit.bor
local lshift = bit.lshift
local assert = assert
local byte = string.byte
local concat = table.concat
local sub = string.sub
local ipairs = ipairs
local setmetatable = setmetatable
local tostring = tostring
local type = type

local _M = {}

local EMPTY = {}

-- The bytes Lua's %s matches: tab, LF, VT, FF, CR, space.
local SPACE = { [9] = true, [10] = true, [11] = true, [12] = true, [13] = true, [32] = true }

-- A node keeps its first MAX_PATTERNS non-empty patterns of at most
-- MAX_PATTERN_BYTES each: the server's own bounds (DATAPLANE 2.1), so a
-- published config loses nothing, while a hand-written one cannot make a
-- request run thousands of patterns. Each worker logs what it left out once
-- per load of the rules; a left-out pattern is absent (it never matches).
local MAX_PATTERNS = 32
local MAX_PATTERN_BYTES = 256
-- PCRE counts the steps of a match attempt against it and gives up past
-- it: about 0.2 ms of a worker with the JIT, where PCRE's own default (10
-- million) is 13 ms. A pattern cannot raise it: a limit set in the pattern
-- only lowers the caller's (lua_regex_match_limit), and of two in a
-- pattern the lower one holds.
local MATCH_LIMIT = "(*LIMIT_MATCH=100000)"
-- The limit alone does not bound a search: PCRE counts afresh at every
-- position of the subject it tries, and one step can scan the rest of the
-- subject, so what a pattern can cost grows with the User-Agent (under the
-- limit above, a pattern that backtracks exponentially spent 200 ms of a
-- worker on a 16 KB UA, 5 to 8 ms on 512 bytes). So PCRE patterns only see
-- User-Agents of up to MAX_MATCHED_UA bytes, more than browsers send; a
-- longer one counts as a match.
--
-- The automaton sees the whole User-Agent: 32 block-list patterns cost 58
-- us on a 16 KB UA once cached, where a cap would block every long UA. What
-- it has not cached is what costs: a pathological pattern (a[ab]{20}c) on a
-- fresh random UA makes a step at nearly every byte, 1.5 to 2.3 ms for 512
-- bytes but 35 to 60 ms for 16 KB. So a search may make at most
-- MAX_MATCHED_UA steps, which no UA of up to that many bytes can exceed: a
-- longer one that needs more costs no more than a 512-byte one and counts
-- as a match, as every longer one did before.
local MAX_MATCHED_UA = 512
-- A step's cost grows with the NFA states live at once: a step of
-- a[ab]{0,600}c walks hundreds of them, and under 32 such patterns one
-- fresh 512-byte UA of a's and b's cost 450 ms. So the steps
-- of a node's automata may also cost at most MAX_MATCH_WORK between them
-- (NFA instructions walked, copied and compared, and slots of new DFA
-- states: 2 to 4 ms of a worker); past that the UA counts as a match,
-- logged once per worker and node. A block list of 32 patterns costs
-- 5 000 to 13 500 for a 512-byte UA its cache has not seen, and
-- a[ab]{20}c 14 600, so up to that length those still get Go's answer;
-- patterns with long counted repeats of broad classes (.{0,200}) whose
-- DFA outgrows the cache are what can reach it on an ordinary UA.
local MAX_MATCH_WORK = 65536
-- Warms a fresh automaton's cache at compile time with the bytes of common
-- User-Agents, so the first requests after a load are not the ones to pay
-- for them (600 us for a Chrome UA and 32 patterns).
local WARM_UA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    .. "Chrome/120.0.0.0 Safari/537.36 (Macintosh; Intel Mac OS X 10_15_7) (X11; Linux x86_64; rv:121.0) "
    .. "Gecko/20100101 Firefox/121.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Version/17.1 Mobile/15E148 "
    .. "(Linux; Android 14; Pixel 8) Edg/120.0.2210.91 curl/8.5.0"

-- s without leading and trailing white space, one byte test per byte
-- removed: a Lua pattern like "^%s*(.-)%s*$" retries its tail at every byte
-- of a run of inner white space, which is quadratic in the run (half a
-- second of a worker for "\va", 15 000 spaces, "b").
local function trim(s)
    local i, j = 1, #s
    while SPACE[byte(s, i)] do
        i = i + 1
    end
    while j > i and SPACE[byte(s, j)] do
        j = j - 1
    end
    if i == 1 and j == #s then
        return s
    end
    return sub(s, i, j)
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
-- Its byte classes fold case, so the UA is scanned as if lower-cased
-- without making a lower-cased copy of it.
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

    local a = aho.build(tokens, true)
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

-- The browser and OS labels of s (trimmed, non-empty), in one pass.
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

-- The browser and OS labels of a trimmed User-Agent.
local function labels(ua)
    if ua == "" then
        return "Unknown", "Unknown"
    end
    return classify(ua)
end

-- Exposed for tests: the browser and OS labels of a raw User-Agent.
function _M.classify(ua)
    return labels(trim(ua or ""))
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
        local ignored, taken, names = {}, {}, {}
        for i, p in ipairs(config.custom_ua_patterns) do
            if type(p) == "string" and p ~= "" then
                local name = "custom_ua_patterns[" .. i .. "]"
                if #taken == MAX_PATTERNS then
                    ignored[#ignored + 1] = name .. " and later: over the " .. MAX_PATTERNS .. "-pattern cap"
                    break
                end
                if #p > MAX_PATTERN_BYTES then
                    ignored[#ignored + 1] = name .. ": over the " .. MAX_PATTERN_BYTES .. "-byte cap"
                else
                    taken[#taken + 1] = p
                    names[#taken] = name
                end
            end
        end
        if #ignored > 0 then
            c.ignored = "ua_check ignored " .. concat(ignored, "; ")
        end
        local m, refused = regex.compile(taken)
        if #m.groups > 0 then
            regex.match(m, WARM_UA)
            c.automaton = m
        end
        for k, p in ipairs(taken) do
            local why = refused[k]
            if why then
                local pattern = MATCH_LIMIT .. p
                -- Compiling (and caching) happens on the first call.
                local _, _, err = re_find("", pattern, "jo")
                if err then
                    c.err = "ua_check " .. names[k] .. " " .. p .. " is not a valid regular expression: " .. why
                        .. " (PCRE: " .. tostring(err) .. ")"
                    break
                end
                ngx.log(ngx.WARN, "openflare waf ua_check ", names[k], " ", p, " runs on PCRE, under its match limit",
                    " and on User-Agents of up to ", MAX_MATCHED_UA, " bytes (", why, "); logged once per worker")
                c.patterns[#c.patterns + 1] = { pattern = pattern, name = names[k], source = p }
            end
        end
    end
    compiled[config] = c
    return c
end

-- The request's trimmed User-Agent, read and trimmed once per request.
local function request_ua(req)
    local ua = req.ua
    if not ua then
        ua = ngx.var.http_user_agent
        if type(ua) ~= "string" then
            ua = ""
        end
        ua = trim(ua)
        req.ua = ua
    end
    return ua
end

-- Whether a custom pattern finds ua. One that gives up (the match limit, or
-- the JIT's stack) counts as a match: the node answers false, as for the
-- User-Agents the pattern was written to refuse, so a client cannot get
-- past a pattern by making it give up, nor by making its UA too long to
-- match (check); a UA that costs a pattern 100 000 steps is no browser's.
local function pattern_hit(p, ua)
    local from, _, err = re_find(ua, p.pattern, "jo")
    if from then
        return true
    end
    if err then
        if not p.warned then
            p.warned = true
            ngx.log(ngx.WARN, "openflare waf ua_check ", p.name, " ", p.source, " gave up on a User-Agent (",
                err, "), which counts as a match; logged once per worker")
        end
        return true
    end
    return false
end

-- Returns true when the request passes, false when it does not, or nil and
-- an error message (the runtime then fails closed). req is the walk's
-- per-request table.
function _M.check(config, req)
    local c = compiled[config] or _M.compile(config)
    if c.err then
        return nil, c.err
    end
    local ua = request_ua(req)

    if c.require_ua and ua == "" then
        return false
    end

    local browser, os
    if c.block_common_bots or c.block_abnormal_ua or c.browsers or c.oses then
        browser, os = req.ua_browser, req.ua_os
        if not browser then
            browser, os = labels(ua)
            req.ua_browser, req.ua_os = browser, os
        end
    end

    if c.block_common_bots and (browser == "Bot" or os == "Bot") then
        return false
    end
    if c.block_abnormal_ua and (browser == "Other" or browser == "Unknown") then
        return false
    end
    if c.block_custom_ua then
        local m = c.automaton
        if m then
            local hit = regex.match(m, ua, MAX_MATCHED_UA, MAX_MATCH_WORK)
            if hit == nil and not c.over_budget then
                c.over_budget = true
                ngx.log(ngx.WARN, "openflare waf ua_check custom_ua_patterns needed more than ", MAX_MATCHED_UA,
                    " new DFA steps or ", MAX_MATCH_WORK, " units of work for a User-Agent of ", #ua,
                    " bytes, which counts as a match (long counted repeats such as .{0,200} cost the most);",
                    " logged once per worker")
            end
            if hit ~= false then
                return false
            end
        end
        if #c.patterns > 0 then
            if #ua > MAX_MATCHED_UA then
                return false
            end
            for _, p in ipairs(c.patterns) do
                if pattern_hit(p, ua) then
                    return false
                end
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
