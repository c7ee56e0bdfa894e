-- Code injection for security_check's command_injection flag: input that
-- an interpreter in the application runs, PHP (eval, assert, templates,
-- unserialize, PHP-CGI arguments) and Java (Log4j lookups, OGNL, SpEL and
-- EL expressions, serialised objects, Spring's class-loader binding).
-- Each rule starts with a plain search for the text it needs, so a value
-- without any of it costs a few searches; the Log4j lookups are resolved
-- innermost first, each pass shorter than the last and at most eight.

local byte = string.byte
local find = string.find
local gsub = string.gsub
local ipairs = ipairs
local sub = string.sub

local lists = require("waf.lists")

local _M = {}

-- PHP functions that run commands or code, include files, or decode a
-- payload for them.
local PHP_CALLS = { "system", "exec", "shell_exec", "passthru", "popen", "proc_open", "pcntl_exec", "eval", "assert",
    "create_function", "call_user_func", "call_user_func_array", "array_map", "usort", "preg_replace",
    "file_put_contents", "fwrite", "include", "include_once", "require", "require_once", "highlight_file",
    "show_source", "phpinfo", "base64_decode", "str_rot13", "gzinflate", "file_get_contents" }

local NAME = {}
for b = 0, 255 do
    NAME[b] = false
end
for b = 97, 122 do
    NAME[b] = true
end
for b = 48, 57 do
    NAME[b] = true
end
NAME[95] = true

-- After "name(": an argument a payload has (a string, a variable, a
-- backtick command, another call) or the empty call phpinfo() makes.
local ARG = { [39] = true, [34] = true, [36] = true, [96] = true, [41] = true, [64] = true }

-- include('x') in other languages' code: PHP's names a path, a URL, a
-- wrapper or a variable.
local INCLUDES = { include = true, include_once = true, require = true, require_once = true }
local function include_arg(s, i)
    local b = byte(s, i)
    if b == 36 then
        return true
    end
    local close = find(s, ")", i, true) or #s + 1
    local arg = sub(s, i, close - 1)
    return find(arg, "/", 1, true) ~= nil or find(arg, "\\", 1, true) ~= nil or find(arg, ":", 1, true) ~= nil
        or find(arg, ".php", 1, true) ~= nil or find(arg, ".inc", 1, true) ~= nil
end

local PHP_CALL_LIST = lists.new(PHP_CALLS)
local MAX_MATCHES = 4096

local function php_call(s)
    local n = lists.each(PHP_CALL_LIST, s, MAX_MATCHES)
    -- the comment end last found, and past where there is none: each byte
    -- is searched once however many names precede one comment
    local close, none_after = 0, #s + 1
    for m = 1, n do
        local name = PHP_CALLS[lists.WORD[m]]
        local p = lists.AT[m]
        local e = p + #name
        if not NAME[byte(s, p - 1) or 0] and not NAME[byte(s, e) or 0] then
            -- name, then white space or /* */ comments, then "("
            local k = e
            while true do
                local b = byte(s, k)
                if b == 32 or b == 9 or b == 10 or b == 13 then
                    k = k + 1
                elseif b == 47 and byte(s, k + 1) == 42 and k + 2 < none_after then
                    if close < k + 2 then
                        close = find(s, "*/", k + 2, true) or 0
                        if close == 0 then
                            none_after = k + 2
                            break
                        end
                    end
                    k = close + 2
                else
                    break
                end
            end
            if byte(s, k) == 40 then
                local a = byte(s, k + 1)
                if ARG[a] and (a ~= 41 or name == "phpinfo") and (not INCLUDES[name] or include_arg(s, k + 1)) then
                    return true
                end
            elseif byte(s, k) == 41 and byte(s, p - 1) == 40 and byte(s, k + 1) == 40 then
                return true -- (system)('id')
            end
        end
    end
    return false
end

local SUPERGLOBAL_LIST = lists.new({ "$_get", "$_post", "$_request", "$_cookie", "$_server", "$_files", "$_env",
    "$globals" })

local function php(s)
    if find(s, "<?", 1, true) then
        local p = find(s, "<?", 1, true)
        local w = sub(s, p + 2, p + 5)
        if w == "php" or sub(w, 1, 1) == "=" or find(w, "^%s+[%a$]") then
            return "php tag"
        end
    end
    if (find(s, "$_", 1, true) or find(s, "$globals", 1, true)) and lists.first(SUPERGLOBAL_LIST, s) then
        return "php superglobal"
    end
    if php_call(s) then
        return "php call"
    end
    -- serialised objects: O:8:"stdClass":..., C:11:"ArrayObject":...,
    -- a:2:{i:0;...
    if find(s, ':"', 1, true) or find(s, ":{", 1, true) then
        if find(s, "%f[%w][oc]:%d+:\"[%w_\\]+\":%d+:{") or find(s, "%f[%w]a:%d+:{[isbdoa]:") then
            return "php object"
        end
    end
    if find(s, "{php}", 1, true) or find(s, "${@", 1, true) or find(s, "{${", 1, true) then
        return "php template"
    end
    if find(s, "{{", 1, true) and (find(s, "_self.", 1, true) or find(s, "|filter(", 1, true) or find(s, "|map(", 1, true)) then
        return "twig template"
    end
    if find(s, "allow_url_include", 1, true) or find(s, "auto_prepend_file", 1, true) or find(s, "disable_functions", 1, true) then
        return "php-cgi arguments"
    end
    if find(s, "$_=", 1, true) and find(s, '^"', 1, true) then
        return "php xor obfuscation"
    end
    return nil
end

-- A Log4j lookup, innermost: ${lower:j} is j, ${env:X:-j} is j,
-- ${date:'j'} is j; others (${env:HOME}) stand for some text.
local function resolve(inner)
    local d = find(inner, ":-", 1, true)
    if d then
        return sub(inner, d + 2)
    end
    local c = find(inner, ":", 1, true)
    if not c then
        return "x"
    end
    local kind = sub(inner, 1, c - 1)
    local v = sub(inner, c + 1)
    if kind == "lower" or kind == "upper" then
        return v
    elseif kind == "date" then
        return (gsub(v, "'", ""))
    end
    return "${" .. inner .. "}"
end

-- Lookups Log4j and Commons Text run on their own: a script, a URL, a DNS
-- query, a decoding that hides the rest.
local LOOKUP_LIST = lists.new({ "${jndi:", "${script:", "${url:", "${dns:", "${base64:" })

local function log4j(s)
    if not find(s, "${", 1, true) then
        return nil
    end
    local t = gsub(s, "%s", "")
    for _ = 1, 8 do
        local r, n = gsub(t, "%${([^${}]*)}", resolve)
        if n == 0 or r == t then
            break
        end
        -- a resolved lookup stays "${...}" only when it is not one of the
        -- rewriting kinds: keep those, and stop
        t = r
        if find(t, "jndi:", 1, true) then
            break
        end
    end
    if find(t, "jndi:", 1, true) then
        return "jndi lookup"
    end
    if lists.first(LOOKUP_LIST, s) then
        return "lookup"
    end
    return nil
end

-- Names only Java exploitation uses.
local JAVA = { "java.lang.runtime", "getruntime()", "processbuilder", "class.forname(", ".forname(", "getclassloader",
    "javax.naming", "initialcontext", "invokertransformer", "jdbcrowsetimpl", "_memberaccess", "@ognl.", "ognlutil",
    "ognlcontext", "xwork.methodaccessor", "t(java.", "t(org.", "${pagecontext", "${applicationscope", "${facescontext",
    "#{request.", "class.module.classloader", "class.classloader", "java.lang.system", "ro0ab", "\172\237\0\5",
    "commons.collections", "templatesimpl" }
local JAVA_LIST = lists.new(JAVA)

local function java(s)
    local why = log4j(s)
    if why then
        return why
    end
    if lists.first(JAVA_LIST, s) then
        return "java"
    end
    -- "@type"/"@class" naming a Java class (not JSON-LD's "@type":"Person")
    if find(s, '"@', 1, true) and (find(s, '"@type"%s*:%s*"[%l]+%.[%l]') or find(s, '"@class"%s*:%s*"[%l]+%.')) then
        return "java polymorphic json"
    end
    -- expression-language probes: ${7*7}, #{7*7}, {{7*7}}
    if find(s, "*", 1, true) and (find(s, "[$#]{%s*%d+%s*%*%s*%d+%s*}") or find(s, "{{%s*%d+%s*%*%s*%d+%s*}}")) then
        return "expression probe"
    end
    return nil
end

-- Returns a reason when the lower-cased s is PHP or Java code injection.
function _M.detect(s)
    return php(s) or java(s)
end

return _M
