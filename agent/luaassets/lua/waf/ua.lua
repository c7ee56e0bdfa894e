-- ua_check node (DATAPLANE 2.5): does the request's User-Agent pass?
--
-- compile(config) turns a node config into a checker once per worker (the
-- runtime calls it for every ua_check node when it loads the rules; a
-- config it has not seen is compiled on first use). check(config) then
-- classifies the trimmed, lower-cased User-Agent with one regex scan per
-- table (browser, OS) and applies the node's rules in the documented order.
--
-- Custom patterns are PCRE (ngx.re.find, "jo"), matched case-sensitively
-- and unanchored against the original User-Agent, as the server validates
-- them as regular expressions. A pattern PCRE cannot compile makes the node
-- an error, so requests reaching it fail closed.

local ngx = ngx
local re_find = ngx.re.find
local find = string.find
local lower = string.lower
local match = string.match
local sub = string.sub
local concat = table.concat
local gsub = string.gsub
local ipairs = ipairs
local pairs = pairs
local setmetatable = setmetatable
local tostring = tostring
local type = type

local _M = {}

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

local function quote(token)
    return (gsub(token, "[%^%$%(%)%%%.%[%]%*%+%-%?%{%}|\\/]", "\\%0"))
end

-- Builds one scanner per table: a regex whose only branch is a lookahead,
-- so it matches (empty) at every position where some token starts, and
-- the capture names the token. Scanning every such position finds every
-- token present, also overlapping ones (e.g. "chrome" in "chromedg/").
local function table_scanner(rules)
    local alts, rank = {}, {}
    for i, rule in ipairs(rules) do
        for _, tok in ipairs(rule.tokens) do
            alts[#alts + 1] = quote(tok)
            if rank[tok] == nil then
                rank[tok] = i
            end
        end
    end
    -- Exclusions must be seen too, even when they are no rule's token.
    for _, rule in ipairs(rules) do
        for _, tok in ipairs(rule.exclude or {}) do
            if rank[tok] == nil then
                alts[#alts + 1] = quote(tok)
                rank[tok] = 0
            end
        end
    end
    -- Longer tokens first, so that a token that is a prefix of another
    -- never hides it at the same position.
    table.sort(alts, function(a, b)
        if #a ~= #b then
            return #a > #b
        end
        return a < b
    end)
    return { regex = "(?=(" .. concat(alts, "|") .. "))", rank = rank, rules = rules }
end

local BROWSER_SCAN = table_scanner(BROWSERS)
local OS_SCAN = table_scanner(OSES)

local scan_ctx = {}

-- Returns the label of the first rule matching s (lower-cased, non-empty).
local function classify(scan, s)
    local seen = {}
    local ctx = scan_ctx
    ctx.pos = 1
    local n = #s
    while ctx.pos <= n do
        local from, to, err = re_find(s, scan.regex, "jo", ctx, 1)
        if not from then
            if err then
                error("ua_check classifier: " .. tostring(err), 0)
            end
            break
        end
        seen[sub(s, from, to)] = true
        ctx.pos = from + 1
    end
    local rank = scan.rank
    local best
    for tok in pairs(seen) do
        local r = rank[tok]
        if r > 0 and (best == nil or r < best) then
            -- An excluded rule falls through to a later one: check below.
            local rule = scan.rules[r]
            local excluded = false
            for _, ex in ipairs(rule.exclude or {}) do
                if seen[ex] then
                    excluded = true
                    break
                end
            end
            if not excluded then
                best = r
            end
        end
    end
    if best then
        return scan.rules[best].label
    end
    return "Other"
end

-- Exposed for tests: the browser and OS labels of a raw User-Agent.
function _M.classify(ua)
    local ual = lower(match(ua or "", "^%s*(.-)%s*$"))
    if ual == "" then
        return "Unknown", "Unknown"
    end
    return classify(BROWSER_SCAN, ual), classify(OS_SCAN, ual)
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
    if find(ua, "^%s") or find(ua, "%s$") then
        ua = match(ua, "^%s*(.-)%s*$")
    end

    if c.require_ua and ua == "" then
        return false
    end

    local browser, os
    if c.block_common_bots or c.block_abnormal_ua or c.browsers or c.oses then
        if ua == "" then
            browser, os = "Unknown", "Unknown"
        else
            local ual = lower(ua)
            browser = classify(BROWSER_SCAN, ual)
            os = classify(OS_SCAN, ual)
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
