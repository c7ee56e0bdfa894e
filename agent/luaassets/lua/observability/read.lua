-- GET /openflare/observability: nginx connection counters as JSON.
--
-- Always answers 200. The counters come from a subrequest to the
-- stub_status location of the same server; if it fails or does not answer
-- 200, "ok" is false and every counter is 0.

local cjson = require("cjson.safe")

local ngx = ngx
local pcall = pcall
local tonumber = tonumber
local type = type

local STUB_STATUS_URI = "/openflare/stub_status"

local function counter(text, label)
    return tonumber(text:match(label .. ":%s*(%d+)")) or 0
end

local function read_connections()
    local ok, res = pcall(ngx.location.capture, STUB_STATUS_URI)
    if not ok or not res or res.status ~= ngx.HTTP_OK or type(res.body) ~= "string" then
        return false, { active = 0, reading = 0, writing = 0, waiting = 0 }
    end
    local body = res.body
    return true, {
        active = counter(body, "Active connections"),
        reading = counter(body, "Reading"),
        writing = counter(body, "Writing"),
        waiting = counter(body, "Waiting"),
    }
end

local ok, connections = read_connections()
ngx.status = ngx.HTTP_OK
ngx.header["Content-Type"] = "application/json"
ngx.say(cjson.encode({
    ok = ok,
    captured_at_unix = ngx.time(),
    connections = connections,
}))
