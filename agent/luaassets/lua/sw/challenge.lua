-- Content of the internal location /__openflare_sw_challenge, reached from
-- sw/runtime.lua with ?redir=<homepage URL>.
--
-- The page registers /sw.js and then returns to redir. The __openflare_sw
-- cookie is set whether or not registration succeeds: without it a browser
-- that refuses the worker would be sent back here forever.
--
-- This file is installed both in lua_dir/sw/ and in cert_dir/sw/ (the
-- rendered location runs the cert_dir copy), so it depends on nothing but ngx.

local ngx = ngx
local format = string.format
local pcall = pcall
local type = type

-- Characters that would end the JS string literal, the script element or the
-- line inside it.
local JS_ESCAPES = {
    ["\\"] = "\\\\",
    ['"'] = '\\"',
    ["<"] = "\\x3C",
    ["\r"] = "\\r",
    ["\n"] = "\\n",
}

local function js_escape_char(c)
    return JS_ESCAPES[c] or format("\\x%02X", c:byte())
end

-- Escapes s for a double-quoted JS string literal inside a <script> element.
local function js_string(s)
    s = s:gsub('[\\"<%c]', js_escape_char)
    s = s:gsub("\226\128\168", "\\u2028")
    s = s:gsub("\226\128\169", "\\u2029")
    return '"' .. s .. '"'
end

local function redirect_target()
    local redir = ngx.req.get_uri_args().redir
    if type(redir) == "table" then
        redir = redir[1]
    end
    if type(redir) ~= "string" or redir == "" then
        return "/"
    end
    return redir
end

local PAGE_HEAD = [[<!DOCTYPE html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="robots" content="noindex,nofollow">
<title></title>
</head>
<body>
<script>
(function () {
  var redir = ]]

local PAGE_TAIL = [[;
  function done() {
    document.cookie = "__openflare_sw=1; Path=/; Max-Age=31536000; Secure; SameSite=Lax";
    location.replace(redir);
  }
  if ("serviceWorker" in navigator) {
    try {
      navigator.serviceWorker.register("/sw.js").then(done, done);
    } catch (e) {
      done();
    }
  } else {
    done();
  }
})();
</script>
</body>
</html>
]]

-- A broken redir must not strand the visitor: fall back to the homepage.
local ok, target = pcall(redirect_target)
if not ok then
    ngx.log(ngx.WARN, "openflare sw: cannot read redir, using /: ", target)
    target = "/"
end

ngx.status = ngx.HTTP_OK
ngx.header["Content-Type"] = "text/html; charset=utf-8"
ngx.print(PAGE_HEAD, js_string(target), PAGE_TAIL)
