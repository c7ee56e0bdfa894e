-- pass-challenge endpoint (DATAPLANE 6.5): checks a solved challenge,
-- consumes it, opens a session for the challenge's host at its difficulty
-- and sends the visitor back to the page it asked for (on this host only).

local cjson = require("cjson.safe")
local pow = require("pow.runtime")

local ngx = ngx
local floor = math.floor
local format = string.format
local lower = string.lower
local rep = string.rep
local sub = string.sub
local tonumber = tonumber
local type = type

local function reply(status, msg)
    ngx.status = status
    ngx.header["Content-Type"] = "application/json"
    ngx.header["Cache-Control"] = "no-store"
    ngx.print(cjson.encode({ error = msg }), "\n")
    return ngx.exit(ngx.HTTP_OK)
end

local arg = pow.arg

local site = ngx.var.openflare_waf_site
if not site or site == "" then
    return reply(ngx.HTTP_FORBIDDEN, "PoW site not resolved; openflare_waf_site is required")
end

local args = ngx.req.get_uri_args()
local id, response, nonce = arg(args, "id"), arg(args, "response"), arg(args, "nonce")
if not id or id == "" or not response or response == "" or not nonce or nonce == "" then
    return reply(ngx.HTTP_BAD_REQUEST, "missing parameters")
end
local n = tonumber(nonce)
if not n or n ~= n or n == math.huge or n == -math.huge or n >= 2 ^ 53 or n <= -2 ^ 53 then
    return reply(ngx.HTTP_BAD_REQUEST, "invalid nonce")
end

local ok, cerr = pow.crypto_ready()
if not ok then
    ngx.log(ngx.ERR, "openflare pow pass-challenge: ", cerr)
    return reply(ngx.HTTP_INTERNAL_SERVER_ERROR, "PoW verification unavailable")
end

local challenges = ngx.shared.openflare_pow_challenges
local raw = challenges and challenges:get(id)
if type(raw) ~= "string" then
    return reply(410, "challenge expired or not found")
end
local record = cjson.decode(raw)
if type(record) ~= "table" or type(record.data) ~= "string" or type(record.host) ~= "string" then
    return reply(ngx.HTTP_INTERNAL_SERVER_ERROR, "invalid challenge data")
end

-- The server recomputes the hash; the client's answer is only compared.
local digest = pow.sha256_hex(record.data .. format("%.0f", floor(n)))
if not digest then
    return reply(ngx.HTTP_INTERNAL_SERVER_ERROR, "PoW verification unavailable")
end
if lower(response) ~= digest then
    return reply(ngx.HTTP_FORBIDDEN, "hash mismatch")
end
local difficulty = floor(tonumber(record.difficulty) or 4)
if difficulty < 0 then
    difficulty = 0
end
if sub(digest, 1, difficulty) ~= rep("0", difficulty) then
    return reply(ngx.HTTP_FORBIDDEN, "insufficient difficulty")
end

-- Single use, even for two answers racing each other: only the request
-- that adds the marker gets a session.
local claimed = challenges:add("used:" .. id, true, 60)
challenges:delete(id)
if not claimed then
    return reply(410, "challenge expired or not found")
end

local token, terr = pow.random_hex(20)
local limits = pow.normalise(record)
local opened = token
if token then
    opened, terr = pow.open_session(token, record.host, difficulty, limits.session_ttl, limits.session_max_lifetime)
end
if not opened then
    ngx.log(ngx.ERR, "openflare pow pass-challenge: ", terr)
    return reply(ngx.HTTP_INTERNAL_SERVER_ERROR, "PoW verification unavailable")
end

local redir = arg(args, "redir")
if redir and redir ~= "" then
    return ngx.redirect(pow.safe_redirect(redir, ngx.var.host), ngx.HTTP_MOVED_TEMPORARILY)
end
ngx.status = ngx.HTTP_OK
ngx.header["Content-Type"] = "application/json"
ngx.header["Cache-Control"] = "no-store"
ngx.print('{"ok":true}\n')
