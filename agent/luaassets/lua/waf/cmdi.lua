-- Command injection detection for security_check: input that a shell (sh
-- or cmd.exe) would run as a command of its own when the application puts
-- it into a command line.
--
-- The input is first unquoted the way a shell reads a word: quotes and
-- backslashes inside a word are dropped (w'h'o"am"i, wh\oami), $@ and
-- empty expansions vanish, ${IFS} and $IFS$9 are white space. Then:
--   * command substitution: $(cmd ...), `cmd ...`, <(cmd);
--   * a command after a separator (; | || & && newline) or at the start;
--   * expansion tricks no text has (${IFS}, $IFS, ${PATH:0:1});
--   * shells and interpreters by path (/bin/sh, cmd.exe /c, powershell -e,
--     /dev/tcp/).
-- A command is a word from the lists below; words that are also English
-- (cat, find, more, ...) count only with an argument that looks like a
-- shell's: an option, a path, a redirection or nothing at all after a
-- separator at the end.

local byte = string.byte
local ipairs = ipairs
local find = string.find
local gsub = string.gsub
local sub = string.sub
local concat = table.concat

local _M = {}

local byteset = require("waf.lists").byteset

-- Commands an attacker runs, never English words.
local STRONG = {}
for w in ([[id whoami uname ifconfig ipconfig nslookup wget curl nc ncat netcat bash sh zsh ksh dash csh tcsh
    busybox socat powershell pwsh certutil bitsadmin systeminfo tasklist taskkill wmic python python2 python3 perl
    ruby php lua node base64 xxd telnet crontab nohup sudo chmod chown chgrp useradd usermod passwd ls pwd ps
    netstat ss cmd rm mkfifo mknod tftp ftp scp ssh rsync nmap awk gawk sed xargs env printenv getent hostname
    lsof killall pkill uptime dmesg sysctl iptables apt yum dpkg rpm gcc cc make tar gzip unzip 7z chattr
    reg regsvr32 rundll32 mshta cscript wscript net1 schtasks icacls cacls attrib vssadmin bcdedit
    msiexec ipconfig.exe cmd.exe powershell.exe whoami.exe nc.exe]]):gmatch("%S+") do
    STRONG[w] = true
end

-- Commands that are English words too: they need a shell-like argument.
local WEAK = {}
for w in ([[cat more less head tail find kill type dir echo printf sleep ping touch mv cp ln sort cut tee
    time who which set net host dig file grep wc od strings diff date curl kill shutdown reboot halt start
    call copy del erase ren move mkdir rmdir tree vol ver path help exit eval exec source alias export read]]):gmatch("%S+") do
    if not STRONG[w] then
        WEAK[w] = true
    end
end

local SPACE = byteset({ 32, 9, 10, 13, 11, 12 })
local WORDCH = byteset()
for b = 48, 57 do
    WORDCH[b] = true
end
for b = 97, 122 do
    WORDCH[b] = true
end
WORDCH[95], WORDCH[45], WORDCH[46] = true, true, true -- _ - .

-- shell_word's pieces, reused (nothing yields in between).
local PARTS = {}

-- The word as a shell reads it at i: a run of word bytes with quotes,
-- backslashes and empty expansions inside it dropped. Returns the word and
-- the index after it.
local function shell_word(s, i)
    local k = i
    while WORDCH[byte(s, k)] or byte(s, k) == 47 or byte(s, k) == 63 or byte(s, k) == 42 do
        k = k + 1
    end
    local b = byte(s, k)
    if b ~= 39 and b ~= 34 and b ~= 92 and b ~= 36 then
        return sub(s, i, k - 1), k
    end
    -- the rare word with quoting inside it
    local parts, n = PARTS, 0
    local j = i
    local len = #s
    while j <= len do
        b = byte(s, j)
        if WORDCH[b] or b == 47 then
            k = j
            while WORDCH[byte(s, k)] or byte(s, k) == 47 do
                k = k + 1
            end
            n = n + 1
            parts[n] = sub(s, j, k - 1)
            j = k
        elseif (b == 39 or b == 34) and byte(s, j + 1) == b then
            j = j + 2 -- ''
        elseif (b == 39 or b == 34) and n > 0 and WORDCH[byte(s, j + 1)] then
            j = j + 1 -- w'h'o
        elseif b == 92 and WORDCH[byte(s, j + 1)] then
            j = j + 1 -- wh\oami
        elseif b == 36 and (byte(s, j + 1) == 64 or byte(s, j + 1) == 42) then
            j = j + 2 -- $@ $*
        elseif b == 36 and WORDCH[byte(s, j + 1)] then
            -- $u/usr/bin/id: an unset variable expands to nothing
            j = j + 1
            while WORDCH[byte(s, j)] and byte(s, j) ~= 47 do
                j = j + 1
            end
        else
            break
        end
        if n > 16 then
            break
        end
    end
    return concat(parts, "", 1, n), j
end

-- The path's last part: /usr/bin/wget is wget.
local function base(w)
    for i = #w, 1, -1 do
        if byte(w, i) == 47 then
            return sub(w, i + 1)
        end
    end
    return w
end

-- After a command word ending at j: does an argument look like a shell's?
local function shell_arg(s, j)
    local k = j
    while SPACE[byte(s, k)] do
        k = k + 1
    end
    local b = byte(s, k)
    if b == nil then
        return false
    end
    if k == j then
        -- cat/etc/passwd is not an argument; only ; | & > < after a word
        return b == 59 or b == 124 or b == 38 or b == 62 or b == 60
    end
    if b == 45 or b == 47 or b == 46 or b == 36 or b == 126 or b == 62 or b == 60 or b == 59 or b == 38 or b == 92
            or b == 39 or b == 34 or (b >= 48 and b <= 57) then
        return true
    end
    -- a redirection later in the same command (echo pwned > /var/www/x)
    for x = k, k + 64 do
        local c = byte(s, x)
        if c == nil or c == 59 or c == 124 or c == 38 or c == 10 then
            break
        elseif c == 62 or c == 60 then
            return true
        end
    end
    -- a host or URL (evil.example, http://...), not an English word
    local e = k
    while WORDCH[byte(s, e)] or byte(s, e) == 58 do
        if byte(s, e) == 46 or byte(s, e) == 58 then
            return e > k
        end
        e = e + 1
    end
    return false
end

-- What may follow a command word directly: the end, white space, another
-- separator, a redirection, a closing quote, backtick or parenthesis.
local AFTER_WORD = byteset({ 59, 124, 38, 62, 60, 96, 41, 39, 34, 35 })

-- Only white space from j on.
local function end_of(s, j)
    while SPACE[byte(s, j)] do
        j = j + 1
    end
    return byte(s, j) == nil
end

-- Is a command at s[i] (after white space)? weak_ok: English-like words
-- count too, with a shell-like argument.
local function command_at(s, i, weak_ok)
    while SPACE[byte(s, i)] or byte(s, i) == 123 or byte(s, i) == 40 do -- { (
        i = i + 1
    end
    local w, j = shell_word(s, i)
    if w == "" then
        return false
    end
    local b = base(w)
    if STRONG[b] then
        -- alone (;id), glued to a separator (;id;), or with an argument
        -- ("; ls -la", not "; ls is a command"), or another command
        -- (busybox wget, sudo id)
        local nb = byte(s, j)
        if nb == nil or AFTER_WORD[nb] == true or (SPACE[nb] == true and (shell_arg(s, j) or end_of(s, j))) then
            return true
        end
        if SPACE[nb] then
            local k = j
            while SPACE[byte(s, k)] do
                k = k + 1
            end
            return STRONG[base((shell_word(s, k)))] == true
        end
        return false
    end
    if b == "net" and weak_ok then
        -- Windows: net user, net localgroup administrators
        local k = j
        while SPACE[byte(s, k)] do
            k = k + 1
        end
        local w2 = shell_word(s, k)
        if w2 == "user" or w2 == "localgroup" or w2 == "share" or w2 == "view" or w2 == "use" then
            return true
        end
    end
    if weak_ok and byte(w, 1) == 47 and #w >= 4 and find(w, "/", 2, true) and (find(w, "?", 1, true) or find(w, "*", 1, true)) then
        -- /bin/c?t /etc/pass??: a path the shell's globbing completes
        return true
    end
    if WEAK[b] and weak_ok then
        return shell_arg(s, j)
    end
    return false
end

-- Where a backtick starts a substitution in a command line.
local OPERATOR = byteset({ 61, 59, 124, 38, 40, 34, 39, 36, 62, 60 })

-- Separators after which the shell starts a new command.
local SEPARATORS = byteset({ 59, 124, 38, 10, 13 })

-- Unquoted: ${IFS} and friends become white space.
local function unobfuscate(s)
    if find(s, "$()", 1, true) then
        s = gsub(s, "%$%(%)", "") -- i$()d
    end
    if find(s, "$", 1, true) then
        s = gsub(s, "%${ifs}", " ")
        s = gsub(s, "%$ifs%$?%d?", " ")
        s = gsub(s, "%${[%w_]*:[%d%-]+:?%d*}", "")
    end
    return s
end

-- Returns a reason when s (lower-cased; orig as sent) is command injection.
function _M.detect(s, orig)
    orig = orig or s
    if find(s, "$", 1, true) then
        if find(s, "${ifs", 1, true) or find(s, "$ifs", 1, true) or (find(s, "${", 1, true) and find(s, "%${[%w_]+:%-?%d")) then
            return "shell expansion"
        end
        local plain = unobfuscate(s)
        if plain ~= s then
            s, orig = plain, plain
        end
    end
    local len = #s
    -- One walk over the bytes for the places a command can start: $( <(
    -- and ` (substitution), ; | & and line breaks (chaining).
    local i = 1
    while i <= len do
        local b = byte(s, i)
        if b == 96 then
            -- `cmd` glued to a word or after an operator, not a quoted
            -- command in prose ("use `make test`", ``rst``)
            local j = i - 1
            while SPACE[byte(s, j)] do
                j = j - 1
            end
            local before = byte(s, j)
            local close = find(s, "`", i + 1, true)
            if close and command_at(s, i + 1, true) then
                -- what follows the closing backtick: the end or a command
                -- separator (Mozilla/5.0 `id`), or the substitution is
                -- glued to a word or an operator
                local a = close + 1
                while SPACE[byte(s, a)] do
                    a = a + 1
                end
                local after = byte(s, a)
                local ends = after == nil or after == 59 or after == 124 or after == 38 or after == 35
                local glued = j > 0 and before ~= 96 and (j == i - 1 or OPERATOR[before])
                if ends or glued then
                    return "backticks"
                end
            end
            i = i + 1
        elseif (b == 36 or b == 60) and byte(s, i + 1) == 40 then
            -- $(cmd): Unix commands are lower-case; $(SED) is make's
            local c = byte(orig, i + 2)
            if not (c and c >= 65 and c <= 90) and command_at(s, i + 2, true) then
                return "command substitution"
            end
            i = i + 2
        elseif SEPARATORS[b] then
            local q = i + 1
            while SEPARATORS[byte(s, q)] do
                q = q + 1
            end
            if command_at(s, q, true) then
                return "chained command"
            end
            i = q
        else
            i = i + 1
        end
    end
    -- a command line as the value (wget http://..., nc -e /bin/sh ...), not
    -- a sentence about one ("ls -l now sorts ...")
    local first = 1
    while SPACE[byte(s, first)] do
        first = first + 1
    end
    local w, j = shell_word(s, first)
    if STRONG[base(w)] and SPACE[byte(s, j)] and shell_arg(s, j) and (find(s, ";", 1, true) or find(s, "|", 1, true)
            or find(s, "&", 1, true) or find(s, ">", 1, true) or find(s, "<", 1, true) or find(s, "://", 1, true)
            or find(s, "/dev/", 1, true) or find(s, "/etc/", 1, true) or find(s, "/tmp/", 1, true)
            or find(s, "/bin/", 1, true)) then
        return "command"
    end
    if find(s, "/bin/", 1, true) and (find(s, "/bin/%a*sh%s+%-[ci]") or find(s, "/bin/%a*sh%s*[;|&`]")
            or find(s, "[;|&`(=]%s*/bin/%a*sh") or find(s, "^%s*/bin/%a*sh")) then
        return "shell"
    end
    if find(s, "/dev/tcp/", 1, true) or find(s, "/dev/udp/", 1, true)
            or (find(s, "cmd", 1, true) and find(s, "cmd%.?e?x?e?%s+/[ck]%s"))
            or (find(s, "powershell", 1, true) and find(s, "powershell[%w.]*%s+%-[ec]"))
            or (find(s, "nc", 1, true) and find(s, "%f[%w]nc%s+%-[el]")) then
        return "shell"
    end
    if find(s, "()", 1, true) and (find(s, "^%s*%(%)%s*{") or find(s, "%(%)%s*{%s*:")) then
        return "shellshock"
    end
    return nil
end

return _M
