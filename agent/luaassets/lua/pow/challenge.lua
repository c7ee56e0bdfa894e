-- make-challenge endpoint (DATAPLANE 6.2, 6.3): issues a challenge and
-- answers the challenge page, within a per-client issuing limit.
--
-- The pow node hands its config over either in ngx.ctx (a direct request to
-- this URL, walked in the same request) or, after the internal redirect from
-- the pow node, through openflare_pow_config under the key in the query.

local cjson = require("cjson.safe")
local pow = require("pow.runtime")

local ngx = ngx
local ceil = math.ceil
local concat = table.concat
local format = string.format
local gsub = string.gsub
local type = type

-- Pending challenges share one dict, whose LRU eviction would drop the
-- oldest, another visitor's, once it is full. Each entry is small and of
-- one size (about 200 bytes), and one client (an IPv4 address, an IPv6
-- /64) is issued at most ISSUE_LIMIT per fixed ISSUE_WINDOW seconds: with
-- the default challenge_ttl of 300 s that is at most 300 pending entries,
-- under 2% of the 10 MB dict. 60 a minute is far beyond what people
-- behind one address need (a challenge per navigation until one is
-- solved), carrier-grade NAT included.
local ISSUE_LIMIT = 60
local ISSUE_WINDOW = 60

local function fail(reason)
    ngx.log(ngx.ERR, "openflare pow make-challenge: ", reason)
    return ngx.exit(ngx.HTTP_INTERNAL_SERVER_ERROR)
end

local arg = pow.arg

local HTML_ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

local function html(s)
    return (gsub(s, "[&<>\"']", HTML_ESCAPES))
end

-- JSON placed inside a <script> element: no "<" may end it early.
local function script_json(v)
    return (gsub(cjson.encode(v), "<", "\\u003c"))
end

local function config_from_request(args)
    local cfg = ngx.ctx.openflare_pow_config
    if type(cfg) == "table" then
        return cfg
    end
    local key = arg(args, "openflare_pow_config_key")
    local dict = ngx.shared.openflare_pow_config
    if not key or key == "" or not dict then
        return nil
    end
    local raw = dict:get(key)
    dict:delete(key)
    if type(raw) ~= "string" then
        return nil
    end
    local decoded = cjson.decode(raw)
    if type(decoded) ~= "table" then
        return nil
    end
    return pow.normalise(decoded)
end

local function page(lang, challenge)
    local t = pow.texts(lang)
    local static = pow.STATIC_PREFIX
    local v = pow.VERSION
    return concat({
        '<!DOCTYPE html>\n<html lang="', lang, '">\n<head>\n',
        '<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        '<meta name="robots" content="noindex,nofollow">\n',
        "<title>", html(t.title), "</title>\n",
        '<link rel="stylesheet" href="', static, "css/pow.css?cacheBuster=", v, '">\n',
        "<style>html{color-scheme:light dark}</style>\n",
        '<script id="anubis_challenge" type="application/json">', script_json(challenge), "</script>\n",
        '<script id="anubis_version" type="application/json">', script_json(v), "</script>\n",
        '<script id="anubis_base_prefix" type="application/json">""</script>\n',
        '<script id="anubis_public_url" type="application/json">"__openflare_internal__"</script>\n',
        '<script type="module" src="', static, "js/main.mjs?cacheBuster=", v, '"></script>\n',
        "</head>\n<body>\n<main class=\"pow\">\n",
        '<h1 id="title">', html(t.title), "</h1>\n",
        '<div id="image" class="pow-mark" aria-hidden="true"></div>\n',
        '<p id="status" role="status" aria-live="polite">', html(t.status), "</p>\n",
        '<div id="progress" class="pow-progress" role="progressbar" aria-label="', html(t.progress),
        '" aria-valuemin="0" aria-valuemax="100" aria-valuenow="0"><div class="bar-inner"></div></div>\n',
        '<p class="pow-notice">', html(t.notice), "</p>\n",
        '<details id="why"><summary>', html(t.why), "</summary><p>", html(t.why_text), "</p></details>\n",
        '<noscript><p class="pow-noscript">', html(t.noscript), "</p></noscript>\n",
        "</main>\n</body>\n</html>\n",
    })
end

-- The page replaces whatever was asked for; a request body is dropped.
ngx.req.discard_body()

local args = ngx.req.get_uri_args()
local cfg = config_from_request(args)
if not cfg then
    ngx.status = ngx.HTTP_FORBIDDEN
    ngx.print("PoW graph node was not evaluated for this request\n")
    return ngx.exit(ngx.HTTP_OK)
end

local challenges = ngx.shared.openflare_pow_challenges
if not challenges then
    return fail("lua_shared_dict openflare_pow_challenges is missing")
end

local lang = pow.lang()
local counter = "issued:" .. pow.client_net(ngx.var.remote_addr, 32)
local issued, ierr = challenges:incr(counter, 1, 0, ISSUE_WINDOW)
if not issued then
    return fail("cannot count the challenges issued: " .. tostring(ierr))
end
if issued > ISSUE_LIMIT then
    ngx.status = ngx.HTTP_TOO_MANY_REQUESTS
    ngx.header["Content-Type"] = "text/plain; charset=utf-8"
    ngx.header["Cache-Control"] = "no-store"
    ngx.header["Retry-After"] = format("%d", ceil(challenges:ttl(counter) or ISSUE_WINDOW))
    ngx.print(pow.texts(lang).busy, "\n")
    return ngx.exit(ngx.HTTP_OK)
end

local host_key, err = pow.host_key(ngx.var.host or "")
if not host_key then
    return fail(err)
end
local id
id, err = pow.random_hex(16)
if not id then
    return fail(err)
end
local data
data, err = pow.random_hex(32)
if not data then
    return fail(err)
end

local record = cjson.encode({
    data = data,
    difficulty = cfg.difficulty,
    -- Always the host of this request, never a client-supplied one.
    host = host_key,
    session_ttl = cfg.session_ttl,
    session_max_lifetime = cfg.session_max_lifetime,
})
local ok, serr = challenges:set(id, record, cfg.challenge_ttl)
if not ok then
    return fail("cannot store the challenge: " .. tostring(serr))
end

local body = page(lang, {
    challenge = { id = id, randomData = data, method = cfg.algorithm },
    rules = { difficulty = cfg.difficulty, algorithm = cfg.algorithm },
})
ngx.status = ngx.HTTP_OK
ngx.header["Content-Type"] = "text/html; charset=utf-8"
ngx.header["Cache-Control"] = "no-store"
ngx.print(body)
