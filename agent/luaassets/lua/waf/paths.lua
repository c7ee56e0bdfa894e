-- Detectors for security_check that read an input as a path or a URL:
-- path traversal, local and remote file inclusion, SSRF, and the request
-- smuggling shapes around them (header injection, uploads, XXE). Each
-- takes lower-cased text; each is a bounded number of forward searches.

local byte = string.byte
local gmatch = string.gmatch
local find = string.find
local gsub = string.gsub
local sub = string.sub
local floor = math.floor
local ipairs = ipairs
local tonumber = tonumber

local lists = require("waf.lists")

local _M = {}

local DIGIT = {}
for b = 0, 255 do
    DIGIT[b] = b >= 48 and b <= 57
end

local byteset = require("waf.lists").byteset

-- A segment of two or more dots with a separator next to it: ../, /..,
-- ....// (what is left after a filter removes "../" once), ..;/ (a Tomcat
-- path parameter). Backslashes are separators too.
function _M.traversal(s)
    if find(s, "\\", 1, true) then
        s = gsub(s, "\\", "/")
    end
    local init = 1
    while true do
        local p = find(s, "..", init, true)
        if not p then
            return false
        end
        local e = p + 1
        while byte(s, e + 1) == 46 do
            e = e + 1
        end
        init = e + 1
        local before = byte(s, p - 1)
        local after = byte(s, e + 1)
        if after == 59 then -- ..;/
            local j = e + 1
            while byte(s, j) and byte(s, j) ~= 47 and j < e + 32 do
                j = j + 1
            end
            after = byte(s, j)
        end
        -- three or more dots are a name unless a slash follows (....//)
        if (before == nil or before == 47) and (after == nil or after == 47) and (before == 47 or after == 47)
                and (e - p == 1 or after == 47) then
            return true
        end
    end
end

-- Files that reveal a system: read through traversal or inclusion.
local SENSITIVE = { "etc/passwd", "etc/shadow", "etc/group", "etc/hosts", "etc/crontab", "etc/sudoers",
    "etc/master.passwd", "proc/self/", "win.ini", "boot.ini", "system32/", "windows/system.ini", ".htpasswd",
    ".htaccess", "web.config", "wp-config.php", "id_rsa", ".ssh/", ".bash_history", "/.git/", "/.svn/",
    "/.env", "etc/nginx/", "etc/apache2/", "web-inf/", "meta-inf/", ".aws/credentials", "serviceaccount/token",
    ".docker/config.json", ".kube/config" }

local SENSITIVE_LIST = lists.new(SENSITIVE)
local ENV
for i, f in ipairs(SENSITIVE) do
    if f == "/.env" then
        ENV = i
    end
end

-- Matches looked at per list and string: past them a string is a flood,
-- not text (4096 "/.envx" in a row).
local MAX_MATCHES = 4096

function _M.sensitive_file(s)
    if find(s, "\\", 1, true) then
        s = gsub(s, "\\", "/")
    end
    if find(s, "//", 1, true) then
        s = gsub(s, "//+", "/") -- //etc//passwd
    end
    local pr = find(s, "/proc/", 1, true)
    if pr and DIGIT[byte(s, pr + 6)] then
        return true -- /proc/1/maps
    end
    local n = lists.each(SENSITIVE_LIST, s, MAX_MATCHES)
    for k = 1, n do
        if lists.WORD[k] ~= ENV then
            return true
        end
        -- /.env: the segment, not /.envelope
        local b = byte(s, lists.AT[k] + 5)
        if b == nil or b == 47 or b == 63 or b == 46 then
            return true
        end
    end
    return false
end

-- Stream wrappers and schemes that include or read local files and code.
local WRAPPERS = { "php://", "file://", "zip://", "phar://", "data://text", "data:text/plain;base64", "expect://",
    "glob://", "compress.zlib://", "compress.bzip2://", "ogg://", "rar://", "ssh2.shell://", "ssh2.exec://",
    "jar:file:", "jar:http", "netdoc:" }

local WRAPPER_LIST = lists.new(WRAPPERS)

-- Parameter names that hold a file to include in PHP-style applications.
local INCLUDE_NAMES = { include = true, inc = true, file = true, filename = true, page = true, template = true,
    tpl = true, path = true, dir = true, folder = true, root = true, doc = true, document = true, conf = true,
    config = true, module = true, mod = true, layout = true, pg = true }

-- A parameter name that holds a file or a path: one of INCLUDE_NAMES,
-- or a part of it is one or ends like one (mosConfig_absolute_path,
-- _CONF[path], gallery_basedir).
local function include_name(name)
    if INCLUDE_NAMES[name] then
        return true
    end
    for part in gmatch(name, "[%a%d]+") do
        if INCLUDE_NAMES[part] or sub(part, -4) == "path" or sub(part, -3) == "dir" or sub(part, -4) == "root"
                or sub(part, -4) == "file" then
            return true
        end
    end
    return false
end

-- IPv4 text as inet_aton reads it (1 to 4 parts, each decimal, 0x hex or
-- 0 octal): 127.1, 2130706433, 0x7f000001, 0177.0.0.1. Returns the address
-- as a number, or nil.
local function ipv4(h)
    local parts, n = {}, 0
    local i, len = 1, #h
    if len == 0 or len > 64 then
        return nil
    end
    while i <= len + 1 do
        local j = find(h, ".", i, true) or len + 1
        if j == i then
            return nil
        end
        n = n + 1
        if n > 4 then
            return nil
        end
        local part = sub(h, i, j - 1)
        local v
        local b1, b2 = byte(part, 1, 2)
        if b1 == 48 and b2 == 120 then -- 0x
            v = tonumber(sub(part, 3), 16)
        elseif b1 == 48 and #part > 1 then
            v = tonumber(part, 8)
        else
            v = tonumber(part, 10)
        end
        if not v or v ~= v - v % 1 or b1 == 43 or b1 == 45 or byte(part, -1) == 46 then
            return nil
        end
        parts[n] = v
        i = j + 1
    end
    local a = 0
    for k = 1, n - 1 do
        if parts[k] > 255 then
            return nil
        end
        a = a * 256 + parts[k]
    end
    local room = 256 ^ (5 - n)
    if parts[n] >= room then
        return nil
    end
    return a * room + parts[n]
end

local function internal_v4(a)
    local o1 = floor(a / 16777216)
    local o2 = floor(a / 65536) % 256
    return o1 == 127 or o1 == 10 or o1 == 0 or (o1 == 169 and o2 == 254) or (o1 == 192 and o2 == 168)
        or (o1 == 172 and o2 >= 16 and o2 <= 31) or (o1 == 100 and o2 >= 64 and o2 <= 127)
end

local INTERNAL_NAMES = { localhost = true, ["localhost.localdomain"] = true, ["metadata.google.internal"] = true,
    metadata = true, ["instance-data"] = true, ["ip6-localhost"] = true, ["localtest.me"] = true, ["lvh.me"] = true }

-- Names that resolve inside: the host itself, cluster and service
-- discovery domains, and the wildcard DNS services that answer any IP
-- written in the name (127.0.0.1.nip.io).
local INTERNAL_SUFFIXES = { ".localhost", ".internal", ".svc", ".cluster.local", ".consul", ".local", ".nip.io",
    ".xip.io", ".sslip.io", ".localtest.me", ".lvh.me" }

-- Is host (lower-cased, without port) this machine, a private network or
-- a cloud metadata service?
local function internal_host(h)
    if INTERNAL_NAMES[h] then
        return true
    end
    for _, suffix in ipairs(INTERNAL_SUFFIXES) do
        if sub(h, -#suffix) == suffix then
            return true
        end
    end
    local v6 = byte(h, 1) == 91 and h:match("^%[(.*)%]$")
    if v6 then
        if v6 == "::1" or v6 == "::" or find(v6, "^0*:[0:]*:0*1?$") or find(v6, "^f[cd]") or find(v6, "^fe[89ab]") then
            return true
        end
        local mapped = v6:match("^::ffff:([%d.]+)$")
        local a = mapped and ipv4(mapped)
        return a ~= nil and internal_v4(a)
    end
    local a = ipv4(h)
    return a ~= nil and internal_v4(a)
end

local SCHEME_CHAR = byteset()
for b = 48, 57 do
    SCHEME_CHAR[b] = true
end
for b = 97, 122 do
    SCHEME_CHAR[b] = true
end
SCHEME_CHAR[43], SCHEME_CHAR[45], SCHEME_CHAR[46] = true, true, true

local AUTHORITY_END = byteset({ 47, 63, 35, 92, 32, 9, 10, 13 })

-- The host of the URL whose "://" is at p (lower-cased, without user and
-- port; IPv6 in brackets). at_hash: cut the authority at '#' or not
-- (http://a%23@127.0.0.1/ reads as either host depending on the parser).
local function url_host(s, p, at_hash)
    local e = p + 3
    while true do
        local b = byte(s, e)
        if not b or (AUTHORITY_END[b] and (b ~= 35 or at_hash ~= false)) or e > p + 260 then
            break
        end
        e = e + 1
    end
    local auth = sub(s, p + 3, e - 1)
    for j = #auth, 1, -1 do
        if byte(auth, j) == 64 then -- user@host
            auth = sub(auth, j + 1)
            break
        end
    end
    local host = auth
    if byte(auth, 1) == 91 then
        local close = find(auth, "]", 1, true)
        host = close and sub(auth, 1, close) or auth
    else
        local colon = find(auth, ":", 1, true)
        if colon then
            host = sub(auth, 1, colon - 1)
        end
    end
    if byte(host, -1) == 46 then
        host = sub(host, 1, -2)
    end
    return host
end

-- name: the parameter's lower-cased name, when there is one.
function _M.inclusion(s, name)
    if find(s, "\0", 1, true) then
        return "null byte"
    end
    local n = lists.each(WRAPPER_LIST, s, MAX_MATCHES)
    for k = 1, n do
        -- the wrapper with something to open (not prose: "file:// URLs")
        local b = byte(s, lists.AT[k] + #WRAPPERS[lists.WORD[k]])
        if b and b ~= 32 then
            return "wrapper"
        end
    end
    if find(s, "^%s*\\\\[%w.-]+\\") then
        return "unc path" -- \\host\share\x.php
    end
    local named = name and include_name(name)
    if named and find(s, "^%s*//[%w.-]+/") then
        return "remote include" -- protocol-relative
    end
    if find(s, "://", 1, true) then
        if find(s, "^%s*[hf]t?tps?://") then
            local host = url_host(s, find(s, "://", 1, true))
            if (host and (ipv4(host) or byte(host, 1) == 91)) or byte(s, -1) == 63 or named
                    or find(s, "^%s*%a+://[^/?#]*@") then
                return "remote include"
            end
        end
        -- page=http://..., mosConfig_absolute_path=http://... inside the value
        local init = 1
        for _ = 1, 8 do
            local p = find(s, "=", init, true)
            if not p then
                break
            end
            init = p + 1
            if find(s, "^[hf]t?tps?://", p + 1) then
                local a = p - 1
                while a > 0 and byte(s, a) ~= 38 and byte(s, a) ~= 63 and byte(s, a) ~= 32 and byte(s, a) ~= 47 do
                    a = a - 1
                end
                if include_name(sub(s, a + 1, p - 1)) then
                    return "remote include"
                end
            end
        end
    end
    return nil
end

-- Schemes that reach other protocols from a URL fetcher.
local SSRF_SCHEMES = { gopher = true, dict = true, file = true, ldap = true, ldaps = true, tftp = true, netdoc = true,
    jar = true, sftp = true, smb = true }

function _M.ssrf(s)
    if find(s, "169.254.169.254", 1, true) or find(s, "metadata.google.internal", 1, true) then
        return "metadata service"
    end
    local init, guard = 1, 0
    while guard < 16 do
        guard = guard + 1
        local p = find(s, "://", init, true)
        if not p then
            return nil
        end
        init = p + 3
        local sb = p
        while sb > 1 and SCHEME_CHAR[byte(s, sb - 1)] and sb > p - 16 do
            sb = sb - 1
        end
        local scheme = sub(s, sb, p - 1)
        local after = byte(s, p + 3)
        if SSRF_SCHEMES[scheme] and after and after ~= 32 then
            return "scheme"
        end
        local host, other = url_host(s, p, true), url_host(s, p, false)
        if other ~= host and other ~= "" and internal_host(other) then
            return "internal host"
        end
        if host ~= "" and internal_host(host) then
            return "internal host"
        end
    end
    return nil
end

-- Header names whose injection into a response (or a request the
-- application forwards) changes its meaning.
local HEADERS = { ["set-cookie"] = true, location = true, refresh = true, ["content-type"] = true,
    ["content-length"] = true, ["content-disposition"] = true, ["content-security-policy"] = true,
    ["access-control-allow-origin"] = true, ["access-control-allow-credentials"] = true, ["x-xss-protection"] = true,
    ["cache-control"] = true, ["transfer-encoding"] = true, host = true, cookie = true, link = true,
    ["x-forwarded-for"] = true, ["x-forwarded-host"] = true, ["strict-transport-security"] = true,
    ["x-frame-options"] = true, expires = true, pragma = true, ["content-encoding"] = true, ["set-cookie2"] = true,
    ["x-content-type-options"] = true, ["x-original-url"] = true, ["x-rewrite-url"] = true }

-- CR or LF followed by a header line or a status line: header injection
-- and response splitting. A line break on its own (a textarea, a
-- multipart body) is not.
local HEADER_CHAR = byteset()
for b = 48, 57 do
    HEADER_CHAR[b] = true
end
for b = 97, 122 do
    HEADER_CHAR[b] = true
end
HEADER_CHAR[45] = true

function _M.crlf(s)
    if find(s, "\\n", 1, true) then
        -- \r\n written out, for the layers that unescape it
        s = gsub(gsub(s, "\\r", "\r"), "\\n", "\n")
    end
    local init = 1
    local cr, lf = find(s, "\r", 1, true), find(s, "\n", 1, true)
    while true do
        if cr and cr < init then
            cr = find(s, "\r", init, true)
        end
        if lf and lf < init then
            lf = find(s, "\n", init, true)
        end
        local p = cr and lf and (cr < lf and cr or lf) or cr or lf
        if not p then
            return false
        end
        local j = p + 1
        while true do
            local b = byte(s, j)
            if b == 13 or b == 10 or b == 32 or b == 9 then
                j = j + 1
            else
                break
            end
        end
        init = j
        local e = j
        while HEADER_CHAR[byte(s, e)] do
            e = e + 1
        end
        local name = sub(s, j, e - 1)
        if name ~= "" then
            local k = e
            while byte(s, k) == 32 or byte(s, k) == 9 do
                k = k + 1
            end
            if byte(s, k) == 58 and (HEADERS[name] or (sub(name, 1, 2) == "x-" and #name > 2)) then
                return true
            end
            if name == "http" and byte(s, e) == 47 then
                return true
            end
        end
    end
end

-- Server-side script extensions: an upload with one of them, last or
-- inside the name (shell.php.jpg), can run on the server.
local SCRIPT_EXT = {}
for e in ([[php php2 php3 php4 php5 php6 php7 php8 phtml pht phtm phps phar pgif shtml shtm stm jsp jspx jspf
    jsw jsv jhtml asp aspx asa asax ascx ashx asmx axd cer cdx cfm cfml cgi pl war htaccess htpasswd]]):gmatch("%S+") do
    SCRIPT_EXT[e] = true
end

-- Names a web server reads as its own configuration.
local CONFIG_NAMES = { [".htaccess"] = true, [".htpasswd"] = true, [".user.ini"] = true, ["web.config"] = true,
    ["php.ini"] = true }

-- The lower-cased file name of an upload: is it a server-side script?
function _M.upload_name(fn)
    fn = gsub(fn, "^.*[/\\]", "")
    -- shell.php%00.jpg, shell.php;.jpg, shell.asp::$data, "shell.php. "
    fn = gsub(fn, "[%z;:%s]", ".")
    if CONFIG_NAMES[fn] then
        return true
    end
    local first = true
    for part in fn:gmatch("[^.]+") do
        if not first and SCRIPT_EXT[part] then
            return true
        end
        first = false
    end
    return find(fn, "^%.ht") ~= nil or find(fn, "^%.user%.ini") ~= nil
end

local SCRIPT_TYPES = { "php", "x-httpd", "x-jsp", "x-asp", "x-sh", "x-csh", "x-perl", "x-cgi" }

-- The lower-cased Content-Type of an upload part.
function _M.upload_type(ct)
    for _, t in ipairs(SCRIPT_TYPES) do
        if find(ct, t, 1, true) then
            return true
        end
    end
    return false
end

-- Server-side code in an uploaded file (a web shell behind an image name).
function _M.upload_content(s)
    if find(s, "<?php", 1, true) or find(s, "<?=$", 1, true) or find(s, "<?=`", 1, true) or find(s, "<jsp:", 1, true)
            or find(s, "getruntime().exec", 1, true) then
        return true
    end
    local asp = find(s, "<%", 1, true)
    if asp and (find(s, "^<%%[@=]?%s*page", asp) or find(s, "^<%%=?%s*eval", asp) or find(s, "^<%%=?%s*execute", asp)) then
        return true
    end
    -- ImageMagick (ImageTragick) and Ghostscript commands, a zip entry
    -- that climbs out of the extraction directory
    if find(s, "push graphic-context", 1, true) and (find(s, "|", 1, true) or find(s, "url(", 1, true)) then
        return true
    end
    if sub(s, 1, 2) == "%!" and find(s, "%pipe%", 1, true) then
        return true
    end
    return sub(s, 1, 4) == "pk\3\4" and find(s, "../", 1, true) ~= nil
end

-- XML that makes its parser fetch or expand: entity declarations, an
-- external DTD, XInclude, a UTF-7 declaration (which hides the others).
function _M.xxe(s)
    if find(s, "<!entity", 1, true) or find(s, "<xi:include", 1, true) then
        return true
    end
    local init = 1
    while true do
        local p = find(s, "<!doctype", init, true)
        if not p then
            break
        end
        init = p + 9
        local e = find(s, "[%[>]", init) or #s + 1
        local decl = sub(s, init, e - 1)
        if find(decl, "%ssystem[%s\"']") or find(decl, "%spublic[%s\"']") then
            return true
        end
    end
    return find(s, "^%s*<%?xml[^>]*encoding%s*=%s*[\"']?utf%-?7") ~= nil
end

return _M
