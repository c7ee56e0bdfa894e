-- The agent's self-probe, served on a loopback listener that only the agent
-- calls, after every reload, start and restart. A worker of the running
-- generation proves it can do what the sites need: load every Lua entry
-- point, run the WAF runtime with its config, read the IP-group snapshot
-- and the error-page and service-worker files, and write its temp
-- directories. 200 "ok", or 500 with one line per failure naming the path
-- and the operating system's reason (e.g. "Permission denied").

local LUA_DIR = "__OPENFLARE_LUA_DIR__"
local CERT_DIR = "__OPENFLARE_CERT_DIR__"
local RUNTIME_DIR = "__OPENFLARE_RUNTIME_CONFIG_DIR__"
local TEMP_DIR = "__OPENFLARE_NGINX_CACHE_DIR__"

-- Every script the agent installs under lua_dir (a Go test keeps this list
-- equal to the embedded tree).
local LUA_FILES = {
    "init.lua", "log.lua", "read.lua", "probe.lua",
    "observability/init.lua", "observability/log.lua", "observability/read.lua",
    "pow/challenge.lua", "pow/runtime.lua", "pow/verify.lua",
    "sw/challenge.lua", "sw/runtime.lua",
    "waf/aho.lua", "waf/check.lua", "waf/cmdi.lua", "waf/code.lua", "waf/decode.lua", "waf/geo.lua", "waf/ip_groups.lua",
    "waf/ipmatch.lua", "waf/lists.lua", "waf/paths.lua", "waf/ranges.lua", "waf/regex.lua", "waf/runtime.lua", "waf/security.lua",
    "waf/sqli.lua", "waf/ua.lua", "waf/xss.lua",
}

-- Files read at request time that exist only when a feature is on: a
-- missing one is fine, an unreadable one is not.
local OPTIONAL_FILES = {
    RUNTIME_DIR .. "/waf_config.json",
    RUNTIME_DIR .. "/waf_ip_groups.bin",
    RUNTIME_DIR .. "/waf_ip_groups.json.checksum",
    RUNTIME_DIR .. "/waf_geo.bin",
    CERT_DIR .. "/error_pages/origin_error.html.tmpl",
    CERT_DIR .. "/sw/sw.js",
    CERT_DIR .. "/sw/offline.html",
    CERT_DIR .. "/sw/runtime.lua",
    CERT_DIR .. "/sw/challenge.lua",
    "__OPENFLARE_COUNTRY_MMDB_PATH__",
    "__OPENFLARE_CITY_MMDB_PATH__",
}

local TEMP_DIRS = { "client_temp", "proxy_temp", "fastcgi_temp", "uwsgi_temp", "scgi_temp" }

local failures = {}

local function fail(msg)
    failures[#failures + 1] = msg
end

for _, rel in ipairs(LUA_FILES) do
    local fn, err = loadfile(LUA_DIR .. "/" .. rel)
    if not fn then
        fail("load " .. tostring(err))
    end
end

for _, path in ipairs(OPTIONAL_FILES) do
    local f, err = io.open(path, "rb")
    if f then
        local _, rerr = f:read(1)
        f:close()
        if rerr then
            fail("read " .. path .. ": " .. tostring(rerr))
        end
    elseif not string.find(tostring(err), "No such file or directory", 1, true) then
        fail("open " .. tostring(err))
    end
end

if ngx.shared.openflare_waf_config then
    local ok, runtime = pcall(require, "waf.runtime")
    if not ok then
        -- The first line says which module; the rest is the search path.
        fail("waf runtime: " .. string.match(tostring(runtime), "^[^\n]*"))
    else
        local err = runtime.status()
        if err then
            fail("waf runtime: " .. err)
        end
    end
end

local name = "/.openflare-probe-" .. ngx.worker.pid()
for _, dir in ipairs(TEMP_DIRS) do
    local path = TEMP_DIR .. "/" .. dir .. name
    local f, err = io.open(path, "wb")
    if not f then
        fail("write " .. tostring(err))
    else
        f:close()
        os.remove(path)
    end
end

if #failures == 0 then
    -- The generation tells the agent this worker runs the configuration
    -- it just landed, not the one before.
    ngx.say("ok ", ngx.var.openflare_generation or "")
    return
end
ngx.status = ngx.HTTP_INTERNAL_SERVER_ERROR
ngx.say(table.concat(failures, "\n"))
