-- Service-worker offline mode, access phase (after the WAF).
--
-- A browser that opens the homepage without the __openflare_sw cookie is
-- sent (internal redirect) to a tiny page that registers /sw.js, sets the
-- cookie and returns to the homepage. Everything else passes through, and
-- so does every error: this feature never blocks a request.
--
-- This file is installed both in lua_dir/sw/ (where require("sw.runtime")
-- finds it) and in cert_dir/sw/, so it depends on nothing but ngx.

local ngx = ngx
local find = string.find
local pcall = pcall

local _M = {}

local CHALLENGE_URI = "/__openflare_sw_challenge"

-- Only real browsers can install a service worker.
local function looks_like_browser(ua)
    if find(ua, "Chrome/%d") or find(ua, "Firefox/%d") then
        return true
    end
    return find(ua, "Safari", 1, true) ~= nil and find(ua, "Chrome", 1, true) == nil
end

-- Returns the URL to come back to when this request must get the challenge
-- page, or nil when it passes through.
local function challenge_target()
    if ngx.var.uri ~= "/" or ngx.req.get_method() ~= "GET" then
        return nil
    end
    local ua = ngx.var.http_user_agent
    if not ua or not looks_like_browser(ua) then
        return nil
    end
    local cookie = ngx.var.cookie___openflare_sw
    if cookie and cookie ~= "" then
        return nil
    end
    local target = ngx.var.scheme .. "://" .. ngx.var.host .. "/"
    local args = ngx.var.args
    if args and args ~= "" then
        target = target .. "?" .. args
    end
    return target
end

function _M.check()
    local ok, target = pcall(challenge_target)
    if not ok then
        ngx.log(ngx.WARN, "openflare sw: check failed, passing through: ", target)
        return
    end
    if target then
        return ngx.exec(CHALLENGE_URI, { redir = target })
    end
end

return _M
