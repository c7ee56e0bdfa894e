-- OpenFlare WAF rule engine.
--
-- init() runs once per nginx worker (init_worker_by_lua_block): it loads
-- waf_config.json, orders the rule groups per site and starts the IP-group
-- refresher. The rules are published only when every step succeeded;
-- otherwise the worker stays uninitialised and check() fails closed.
--
-- check() runs in the access phase of every WAF-covered server: it walks the
-- graph of each applicable rule group and either lets the request continue,
-- sends the block response, or fails closed with a 500.

local cjson = require("cjson.safe")
local ipmatch = require("waf.ipmatch")
local ip_groups = require("waf.ip_groups")
local geo = require("waf.geo")

local ngx = ngx
local find = string.find
local io_open = io.open
local ipairs = ipairs
local pairs = pairs
local pcall = pcall
local setmetatable = setmetatable
local tonumber = tonumber
local tostring = tostring
local type = type

local _M = {}

local CONFIG_PATH = "__OPENFLARE_RUNTIME_CONFIG_DIR__/waf_config.json"
local FAIL_BODY = "OpenFlare WAF runtime error\n"
local FAIL_LOG_KEY = "_damaged_graph_logged"
local FAIL_LOG_SECONDS = 60
local DEFAULT_BLOCK_STATUS = 403
local POW_API_PREFIX = "/.within.website/x/cmd/anubis/api/"
local POW_STATIC_PREFIX = "/.within.website/x/cmd/anubis/static/"

local EMPTY = {}

-- Published by init(): { globals = {group...}, chains = {site = {group...}} }.
-- A group is { id = "<id>", graph = <graph>, steps = <node count> }.
local rules

-- Why this worker has no rules, for the agent's self-probe (nil once init
-- succeeded).
local init_error = "init() has not run in this worker"

-- Compiled ips+cidrs matchers per ip_match node config.
local node_matchers = setmetatable({}, { __mode = "k" })

-- The modules of the ua_check and security_check nodes build their
-- automata and word sets as they load, some 8 ms of every new worker's
-- start at each reload: they load with the first rules that have such a
-- node (compile_checks, from init), so a config without one never pays.
local CHECKER_MODULES = { ua_check = "waf.ua", security_check = "waf.security" }
local checkers = {}

local function checker(node_type)
    local m = checkers[node_type]
    if m == nil then
        m = require(CHECKER_MODULES[node_type])
        checkers[node_type] = m
    end
    return m
end

local function list(v)
    if type(v) == "table" then
        return v
    end
    return EMPTY
end

local function count_nodes(graph)
    if type(graph) ~= "table" or type(graph.nodes) ~= "table" then
        return 0
    end
    local n = 0
    for _ in pairs(graph.nodes) do
        n = n + 1
    end
    return n
end

-- Builds the per-site group order: enabled global groups in array order,
-- then the enabled non-global groups of the first binding for the site.
local function prepare(doc)
    local by_id, globals = {}, {}
    for _, g in ipairs(list(doc.rule_groups)) do
        if type(g) == "table" then
            local group = {
                id = tostring(g.id),
                graph = g.graph,
                steps = count_nodes(g.graph),
                enabled = g.enabled == true,
                global = g.is_global == true,
            }
            if by_id[group.id] == nil then
                by_id[group.id] = group
            end
            if group.enabled and group.global then
                globals[#globals + 1] = group
            end
        end
    end

    local chains = {}
    for _, b in ipairs(list(doc.bindings)) do
        if type(b) == "table" and type(b.site_name) == "string" and chains[b.site_name] == nil then
            local chain = {}
            for i, group in ipairs(globals) do
                chain[i] = group
            end
            for _, id in ipairs(list(b.rule_group_ids)) do
                local group = by_id[tostring(id)]
                if group and group.enabled and not group.global then
                    chain[#chain + 1] = group
                end
            end
            chains[b.site_name] = chain
        end
    end
    return { globals = globals, chains = chains }
end

local function load_rules()
    local f, err = io_open(CONFIG_PATH, "rb")
    if not f then
        error("cannot open " .. CONFIG_PATH .. ": " .. tostring(err), 0)
    end
    local raw = f:read("*a")
    f:close()
    if not raw or not find(raw, "%S") then
        error(CONFIG_PATH .. " is empty", 0)
    end
    local doc, derr = cjson.decode(raw)
    if type(doc) ~= "table" then
        error(CONFIG_PATH .. " is not a JSON object: " .. tostring(derr), 0)
    end
    return prepare(doc)
end

-- Compiles every ua_check/security_check node of the groups that can run,
-- and the lists of every pow node, once per worker when the rules load. A
-- node that does not compile (an invalid custom PCRE) is logged here and
-- fails closed when a request reaches it; so is what a node left out of its
-- config (custom patterns over the caps), once per load rather than per
-- request. Returns whether any of those groups has a geo_match node.
local function compile_checks(prepared)
    local seen = {}
    local has_geo = false
    local function compile_group(g)
        local nodes = not seen[g] and type(g.graph) == "table" and g.graph.nodes
        seen[g] = true
        if type(nodes) ~= "table" then
            return
        end
        for id, node in pairs(nodes) do
            if type(node) == "table" and node.type == "geo_match" then
                has_geo = true
            end
            if type(node) == "table" and node.type == "pow" and type(node.config) == "table" then
                -- So that the entries its lists leave out are logged per load, not on a request.
                require("pow.runtime").compile(node.config, "rule group " .. g.id .. " node " .. tostring(id))
            end
            if type(node) == "table" and CHECKER_MODULES[node.type] and type(node.config) == "table" then
                local c = checker(node.type).compile(node.config)
                if c.err then
                    ngx.log(ngx.ERR, "openflare waf rule group ", g.id, " node ", tostring(id), ": ", c.err)
                end
                if c.ignored then
                    ngx.log(ngx.WARN, "openflare waf rule group ", g.id, " node ", tostring(id), ": ", c.ignored)
                end
            end
        end
    end
    for _, g in ipairs(prepared.globals) do
        compile_group(g)
    end
    for _, chain in pairs(prepared.chains) do
        for _, g in ipairs(chain) do
            compile_group(g)
        end
    end
    return has_geo
end

local function init()
    local prepared = load_rules()
    local has_geo = compile_checks(prepared)
    local ok, err = ip_groups.start()
    if not ok then
        error(err, 0)
    end
    if has_geo then
        ok, err = geo.start()
        if not ok then
            error(err, 0)
        end
    end
    rules = prepared
end

-- Loads the rules for this worker. Errors are logged, not raised, so the
-- rest of init_worker still runs; the worker then fails closed per request.
function _M.init()
    local ok, err = pcall(init)
    if not ok then
        init_error = tostring(err)
        ngx.log(ngx.ERR, "openflare waf init failed, every WAF check will fail closed: ", err)
        return
    end
    init_error = nil
end

-- Returns nil when the worker's rules are loaded, else why not.
function _M.status()
    return init_error
end

-- The client address is the TCP peer only; forwarding headers are ignored.
-- It is parsed at most once per request.
local function client(req)
    local cand = req.client
    if cand == nil then
        cand = ipmatch.parse(ngx.var.remote_addr) or false
        req.client = cand
    end
    return cand
end

local function ip_match(config, req)
    local cand = client(req)
    if not cand then
        return false
    end
    local m = node_matchers[config]
    if not m then
        m = ipmatch.compile(config.ips, config.cidrs)
        node_matchers[config] = m
    end
    return ipmatch.match(m, cand) or ip_groups.match(config.ip_group_ids, cand)
end

-- Walks one group's graph. Returns "allow", "block" plus the block node's
-- config, or "error" plus a reason.
local function walk(group, req)
    local graph = group.graph
    if type(graph) ~= "table" or type(graph.nodes) ~= "table" or type(graph.entry) ~= "string" then
        return "error", "rule group " .. group.id .. ": invalid graph"
    end
    local nodes = graph.nodes
    local cur = graph.entry
    -- A DAG reaches a terminal node within as many steps as it has nodes;
    -- running out of steps means a cycle.
    for _ = 1, group.steps do
        local node = nodes[cur]
        if type(node) ~= "table" or type(node.type) ~= "string" then
            return "error", "rule group " .. group.id .. ": node " .. cur .. " is missing or invalid"
        end
        local t = node.type
        local config = node.config
        if type(config) ~= "table" then
            config = EMPTY
        end
        local handle
        if t == "allow" then
            return "allow"
        elseif t == "block" then
            return "block", config
        elseif t == "start" then
            handle = "next"
        elseif t == "ip_match" then
            handle = ip_match(config, req) and "true" or "false"
        elseif t == "geo_match" then
            handle = geo.match(config, client(req)) and "true" or "false"
        elseif t == "pow" then
            -- "takeover": the PoW flow owns the request (DATAPLANE 6.1).
            local result, err = require("pow.runtime").evaluate(config)
            if result ~= "next" then
                return result, err
            end
            handle = "next"
        elseif t == "ua_check" or t == "security_check" then
            -- ua_check keeps what it learns of the User-Agent in req.
            local pass, err = checker(t).check(config, req)
            if pass == nil then
                return "error", "rule group " .. group.id .. ": node " .. cur .. ": " .. tostring(err)
            end
            handle = pass and "true" or "false"
        else
            return "error", "rule group " .. group.id .. ": unknown node type " .. t
        end
        local edges = node.next
        local target = type(edges) == "table" and edges[handle]
        if type(target) ~= "string" then
            return "error", "rule group " .. group.id .. ": node " .. cur .. " has no " .. handle .. " edge"
        end
        cur = target
    end
    return "error", "rule group " .. group.id .. ": graph exceeded maximum steps"
end

local function is_pow_continuation()
    if not ngx.req.is_internal() then
        return false
    end
    local uri = ngx.var.uri or ""
    return find(uri, POW_API_PREFIX, 1, true) == 1 or find(uri, POW_STATIC_PREFIX, 1, true) == 1
end

-- Decides the request. Returns "pass", "block" plus a block config, or
-- "error" plus a reason.
local function evaluate()
    if not rules then
        return "error", "waf runtime is not initialised"
    end
    if is_pow_continuation() then
        ngx.ctx.openflare_pow_takeover = true
        return "pass"
    end
    local site = ngx.var.openflare_waf_site
    local chain = site and rules.chains[site] or rules.globals
    local req = {}
    for _, group in ipairs(chain) do
        local result, detail = walk(group, req)
        if result ~= "allow" then
            return result, detail
        end
    end
    return "pass"
end

local function fail_closed(reason)
    local dict = ngx.shared.openflare_waf_config
    if not dict or dict:add(FAIL_LOG_KEY, true, FAIL_LOG_SECONDS) then
        ngx.log(ngx.ERR, "openflare waf fail-closed: ", reason)
    end
    ngx.ctx.openflare_waf_blocked = true
    ngx.status = ngx.HTTP_INTERNAL_SERVER_ERROR
    ngx.header["Content-Type"] = "text/plain; charset=utf-8"
    ngx.print(FAIL_BODY)
    return ngx.exit(ngx.HTTP_OK)
end

-- The server only allows 400-599; anything else would let a 2xx/3xx or an
-- ngx.exit(0) turn a block into an allow, so it falls back to 403.
local function block_status(config)
    local status = tonumber(config.status_code)
    if not status or status ~= status - status % 1 or status < 400 or status > 599 then
        return DEFAULT_BLOCK_STATUS
    end
    return status
end

local function block(config)
    ngx.ctx.openflare_waf_blocked = true
    local status = block_status(config)
    local body = config.response_body
    if type(body) ~= "string" or body == "" then
        -- nginx produces its own error page (or the origin error page).
        return ngx.exit(status)
    end
    ngx.status = status
    ngx.header["Content-Type"] = "text/html; charset=utf-8"
    ngx.say(body)
    return ngx.exit(ngx.HTTP_OK)
end

-- Content handler of the self-test server's snapshot location: the agent
-- asks after it landed an IP-group or geo snapshot, and the versions on
-- disk are published at once (DATAPLANE 3), each worker adopting them at
-- its next lookup. Answers 200 with one "<what> <version>" line each, or
-- 500 naming what could not be published.
function _M.publish_snapshots()
    local lines, failed = {}, false
    for _, s in ipairs({ { "ip_groups", ip_groups }, { "geo", geo } }) do
        local version, err = s[2].publish()
        if err then
            failed = true
        end
        lines[#lines + 1] = s[1] .. " " .. tostring(version or err)
    end
    ngx.status = failed and 500 or 200
    ngx.header["Content-Type"] = "text/plain"
    ngx.say(table.concat(lines, "\n"))
end

-- Access-phase entry point. Any Lua error in the decision fails closed.
function _M.check()
    local ok, result, detail = pcall(evaluate)
    if not ok then
        return fail_closed("lua error: " .. tostring(result))
    end
    if result == "block" then
        return block(detail)
    end
    if result == "error" then
        return fail_closed(detail)
    end
end

return _M
