-- SQL injection detection for security_check: a SQL lexer and rules over
-- its tokens.
--
-- An input reaches SQL in one of three places: bare (a number or a name,
-- `WHERE id = <input>`), inside a single-quoted string or inside a
-- double-quoted one. The input is lexed from its start for the first, and
-- from just after its first, second and third quote of each kind for the
-- others: that is where the attacker's quote would close the application's
-- string. An attack is a stream whose start breaks out into SQL structure
-- (a boolean comparison, a comment that drops the rest of the query, a
-- stacked statement, UNION SELECT, a clause) or, anywhere in it, a shape no
-- text has (UNION SELECT, a time-delay call, a system table or variable).
--
-- Comments are white space between tokens, MySQL's executable /*! */
-- comments are SQL, and `--`, `#` and an unclosed /* end the stream, so
-- `union/*x*/select`, `union%09select` and `'or'1'='1` lex as the plain
-- forms. Every pass is one left-to-right walk of the bytes (strings and
-- comments are skipped with a plain find) and the rules look at each token
-- a bounded number of times: the cost is linear in the input.

local byte = string.byte
local char = string.char
local find = string.find
local min = math.min
local ipairs = ipairs
local type = type
local pairs = pairs
local lower = string.lower
local sub = string.sub

local _M = {}

local byteset = require("waf.lists").byteset

-- Lexer output, reused by every pass (nothing yields in between): TT[k] is
-- the type of token k, TV[k] its lower-cased word (false for non-words).
local TT, TV = {}, {}

-- Token types:
--   n number or literal   s string   v @variable   w name   f name(
--   U union [all|distinct]   S select   & and/or/xor/&&/||   ! not
--   c comparison   o other operator   T statement verb   K clause word
--   ( ) , ;   C comment that ends the input   x anything else
local KEYWORDS = {
    union = "U", select = "S",
    ["and"] = "&", ["or"] = "&", xor = "&", eqv = "&", imp = "&", ["not"] = "!",
    like = "c", rlike = "c", regexp = "c", is = "c", ["in"] = "c", between = "c", sounds = "c", glob = "c",
    div = "o", mod = "o", binary = "o",
    ["true"] = "n", ["false"] = "n", null = "n",
    insert = "T", update = "T", delete = "T", drop = "T", create = "T", alter = "T", truncate = "T",
    exec = "T", execute = "T", declare = "T", waitfor = "T", shutdown = "T", replace = "T", load = "T",
    ["do"] = "T", call = "T", begin = "T", ["if"] = "T", ["while"] = "T",
    from = "K", where = "K", having = "K", limit = "K", offset = "K", into = "K", values = "K",
    procedure = "K", order = "K", group = "K", by = "K", join = "K", set = "K", case = "K",
    when = "K", ["then"] = "K", ["else"] = "K", ["end"] = "K", top = "K", distinct = "K", all = "K",
    outfile = "K", dumpfile = "K",
}

-- Names whose appearance as a SQL word is an attack on its own: system
-- catalogues, procedures that run commands or reach the network, and file
-- access. Dotted names are looked up per part.
local SYSTEM_NAMES = {
    information_schema = true, xp_cmdshell = true, sp_oacreate = true, sp_executesql = true,
    sp_makewebtask = true, xp_regread = true, xp_dirtree = true, load_file = true, utl_http = true,
    utl_inaddr = true, dbms_pipe = true, dbms_lock = true, sysobjects = true, syscolumns = true,
    sqlite_master = true, pg_sleep = true, msysobjects = true, pg_shadow = true,
}

-- Functions that only SQL has: one called with no arguments that reports
-- on the database, or one called on another's result (ascii(substring(,
-- concat(version(),...), is what blind extraction looks like.
local INFO_CALLS = { version = true, database = true, user = true, current_user = true, session_user = true,
    system_user = true, schema = true, connection_id = true, db_name = true }
local SQL_CALLS = { ascii = true, substring = true, substr = true, mid = true, ord = true, char = true, chr = true,
    hex = true, unhex = true, concat = true, concat_ws = true, group_concat = true, version = true, database = true,
    user = true, current_user = true, schema = true, extractvalue = true, updatexml = true, cast = true,
    convert = true, length = true, compress = true, randomblob = true, floor = true, rand = true, count = true,
    conv = true, load_file = true, name_const = true, exp = true, elt = true, make_set = true, iif = true,
    ["if"] = true, db_name = true, lower = true, upper = true, bin = true, reverse = true, left = true,
    right = true, nvarchar = true, isnull = true, ifnull = true, coalesce = true, char_length = true, lpad = true,
    rpad = true, instr = true, locate = true, position = true, soundex = true, strcmp = true, binary = true,
    ["repeat"] = true, space = true, nullif = true, greatest = true, least = true, md5 = true, sha1 = true,
    current_date = true, now = true, sysdate = true, uuid = true, json_extract = true }

-- Calls whose only use in input is error-based extraction.
local ERROR_CALLS = { extractvalue = true, updatexml = true, name_const = true, gtid_subset = true,
    json_keys = true }

-- Calls that make the database wait: the blind-injection probe.
local DELAY_CALLS = { sleep = true, pg_sleep = true, benchmark = true }

-- Byte classes.
local SPACE, WORD, DIGIT = byteset(), byteset(), byteset()
for b = 0, 32 do
    SPACE[b] = true
end
SPACE[127], SPACE[160] = true, true
for b = 48, 57 do
    WORD[b], DIGIT[b] = true, true
end
for b = 97, 122 do
    WORD[b] = true
end
for b = 128, 255 do
    WORD[b] = true
end
SPACE[160], WORD[160] = true, false
WORD[95], WORD[36] = true, true -- _ $

local B_QUOTE, B_DQUOTE, B_BACKTICK = 39, 34, 96

-- The string starting at i (its opening quote q) ends where? Returns the
-- index after its closing quote, or nil when it runs to the end. A doubled
-- quote and a backslash escape do not close it.
local function string_end(s, i, q)
    local j = i + 1
    local len = #s
    while j <= len do
        local b = byte(s, j)
        if b == 92 and q ~= B_BACKTICK then
            j = j + 2
        elseif b == q then
            if byte(s, j + 1) ~= q then
                return j + 1
            end
            j = j + 2
        else
            j = j + 1
        end
    end
    return nil
end

-- Byte tests the JIT compiles (Lua patterns would stop it).
local ALNUM = byteset()
for b = 48, 57 do
    ALNUM[b] = true
end
for b = 97, 122 do
    ALNUM[b] = true
end

-- Three letters or digits in a row in s[i..]: a word, not "--", "-- -",
-- "#", "#aa".
local function has_word(s, i)
    local run = 0
    for j = i, #s do
        if ALNUM[byte(s, j)] then
            run = run + 1
            if run == 3 then
                return true
            end
        else
            run = 0
        end
    end
    return false
end

-- White space between two other bytes of s[i..] (not just around them).
local function has_space(s, i)
    local seen, gap = false, false
    for j = i, #s do
        if SPACE[byte(s, j)] then
            gap = seen
        elseif gap then
            return true
        else
            seen = true
        end
    end
    return false
end

local function dotted_system(v)
    if v == "mysql.user" or find(v, "dbms_", 1, true) then
        return true
    end
    local i = 1
    while true do
        local dot = find(v, ".", i, true)
        if SYSTEM_NAMES[sub(v, i, (dot or 0) - 1)] then
            return true
        end
        if not dot then
            return false
        end
        i = dot + 1
    end
end

-- SELECT <list> FROM <name>: a list of SQL words that has more than one
-- item or a literal, or a subquery in parentheses, or a FROM followed by a
-- clause ("select one from the list" is none of these).
local ENDS = { C = true, [";"] = true }

local LIST = { n = true, s = true, v = true, w = true, f = true, ["("] = true, [")"] = true, [","] = true, o = true }
local function select_from(k, n)
    local sql = TT[k - 1] == "("
    local j = k + 1
    while j <= n and j < k + 24 do
        local t, v = TT[j], TV[j]
        if t == "K" and v == "from" then
            if j == k + 1 or TT[j + 1] ~= "w" then
                return false
            end
            local t3 = TT[j + 2]
            return sql or t3 == "K" or t3 == ")" or ENDS[t3] == true
        elseif t == "K" and (v == "top" or v == "distinct" or v == "all") then
            sql = true
        elseif not LIST[t] then
            return false
        elseif t ~= "w" then
            sql = true
        end
        j = j + 1
    end
    return false
end

-- Whether the last lex met a system name (SYSTEM_NAMES), and the quote
-- that opened a string it ended inside (false when none).
local lex_system = false
local lex_open, lex_open_at = false, 0
local lex_s = ""
local lex_comment_at = 0

local function push(n, t, v)
    TT[n] = t
    TV[n] = v or false
    return n
end

-- Lexes the lower-cased s from index i into TT/TV, at most max tokens.
-- Returns the count and, when the input ends inside a short string, the
-- byte of the quote that opened it.
local function lex_tokens(s, i, max)
    local n = 0
    local len = #s
    local open = nil
    while i <= len and n < max do
        local b = byte(s, i)
        if SPACE[b] then
            i = i + 1
        elseif b == 47 and byte(s, i + 1) == 42 then -- /*
            if byte(s, i + 2) == 33 then
                -- MySQL runs what follows /*! (after a version number).
                i = i + 3
                while DIGIT[byte(s, i)] do
                    i = i + 1
                end
            else
                local e = find(s, "*/", i + 2, true)
                if not e then
                    lex_comment_at = i
                    n = push(n + 1, "C", not has_word(s, i + 2))
                    return n, nil
                end
                i = e + 2
            end
        elseif b == 42 and byte(s, i + 1) == 47 then -- */ closing /*!
            i = i + 2
        elseif (b == 45 and byte(s, i + 1) == 45) or b == 35 then -- -- and #
            local e = find(s, "\n", i, true)
            if not e then
                lex_comment_at = i
                -- A bare terminator ("admin'--", "x'#"), not a hashtag or
                -- a run of minus-prefixed search words.
                n = push(n + 1, "C", not has_word(s, i + 1))
                return n, nil
            end
            i = e + 1
        elseif b == B_QUOTE or b == B_DQUOTE then
            local e = string_end(s, i, b)
            n = push(n + 1, "s")
            if not e then
                -- The application's closing quote will close it: fine
                -- for SQL when it holds no more than a word.
                lex_open, lex_open_at = b, i
                return n, not has_space(s, i + 1) and b
            end
            i = e
        elseif b == B_BACKTICK then
            local e = string_end(s, i, b)
            n = push(n + 1, "w", "")
            if not e then
                return n, nil
            end
            i = e
        elseif DIGIT[b] or (b == 46 and DIGIT[byte(s, i + 1)]) then
            local j = i
            if b == 48 and (byte(s, i + 1) == 120 or byte(s, i + 1) == 98) then -- 0x 0b
                j = i + 2
                while WORD[byte(s, j)] do
                    j = j + 1
                end
            else
                while DIGIT[byte(s, j)] or byte(s, j) == 46 do
                    j = j + 1
                end
                if byte(s, j) == 101 then -- exponent
                    local k = j + 1
                    local c = byte(s, k)
                    if c == 43 or c == 45 then
                        k = k + 1
                    end
                    if DIGIT[byte(s, k)] then
                        j = k
                        while DIGIT[byte(s, j)] do
                            j = j + 1
                        end
                    end
                end
            end
            n = push(n + 1, "n")
            i = j
        elseif b == 92 and (byte(s, i + 1) == 110 or DIGIT[byte(s, i + 1)]) then -- \N (MySQL's NULL), \1
            n = push(n + 1, "n")
            i = i + 2
            while DIGIT[byte(s, i)] do
                i = i + 1
            end
        elseif b == 64 and (byte(s, i + 1) == 34 or byte(s, i + 1) == 39 or byte(s, i + 1) == 96) then -- @"var"
            local e = string_end(s, i + 1, byte(s, i + 1))
            n = push(n + 1, "v", "@")
            if not e then
                return n, nil
            end
            i = e
        elseif WORD[b] or (b == 64) then -- names and @variables
            local j = i
            if b == 64 then
                j = byte(s, i + 1) == 64 and i + 2 or i + 1
            end
            local k = j
            local dotted = false
            while true do
                while WORD[byte(s, k)] do
                    k = k + 1
                end
                -- a.b: one dotted name
                if byte(s, k) == 46 and WORD[byte(s, k + 1)] then
                    k = k + 1
                    dotted = true
                elseif byte(s, k) == 46 and byte(s, k + 1) == 46 and WORD[byte(s, k + 2)] then
                    k = k + 2 -- master..xp_cmdshell
                    dotted = true
                else
                    break
                end
            end
            if b == 64 then
                n = push(n + 1, k > j and "v" or "x", sub(s, i, k - 1))
            elseif k - i > 40 or k - i == 1 then
                -- longer than any word the rules name, or a letter
                n = push(n + 1, "w", "")
            elseif (byte(s, i - 1) == 46 and WORD[byte(s, i - 2)] and not DIGIT[byte(s, i - 2)])
                    or (byte(s, i - 1) == 62 and byte(s, i - 2) == 45) then
                -- a method (->version(), .user()): not SQL's
                n = push(n + 1, "w", "")
            else
                local w = sub(s, i, k - 1)
                if SYSTEM_NAMES[w] or (dotted and dotted_system(w)) then
                    lex_system = true
                end
                local t = KEYWORDS[w]
                local prev = TT[n]
                if t == "K" and (w == "all" or w == "distinct") and prev == "U" and n > 0 then
                    -- UNION ALL, UNION DISTINCT
                elseif w == "by" and n > 0 and (TV[n] == "order" or TV[n] == "group") then
                    TV[n] = TV[n] .. " by"
                elseif t == "c" and n > 0 and (prev == "!" or (TV[n] == "sounds" and w == "like")) then
                    TT[n] = "c" -- NOT LIKE, NOT IN, SOUNDS LIKE
                elseif w == "not" and n > 0 and TV[n] == "is" then
                    -- IS NOT
                elseif (w == "delay" or w == "time") and n > 0 and TV[n] == "waitfor" then
                    -- WAITFOR DELAY / TIME
                else
                    n = push(n + 1, t or "w", w)
                end
            end
            i = k
        elseif b == 40 then -- (
            local prev = TT[n]
            if n > 0 and (prev == "w" or (prev == "T" and (TV[n] == "replace" or TV[n] == "insert" or TV[n] == "if"))) then
                TT[n] = "f"
            end
            n = push(n + 1, "(")
            i = i + 1
        elseif b == 41 or b == 44 or b == 59 then -- ) , ;
            n = push(n + 1, b == 41 and ")" or b == 44 and "," or ";")
            i = i + 1
        else
            local b2 = byte(s, i + 1)
            if (b == 124 and b2 == 124) or (b == 38 and b2 == 38) then -- || &&
                n = push(n + 1, "&")
                i = i + 2
            elseif b == 61 or b == 60 or b == 62 or (b == 33 and b2 == 61) then -- = < > !=
                local j = i + 1
                while j < i + 3 and (byte(s, j) == 61 or byte(s, j) == 62) do
                    j = j + 1
                end
                if b == 60 and b2 == 60 or b == 62 and b2 == 62 then
                    n = push(n + 1, "o")
                    j = i + 2
                else
                    -- = and != (the tautology's), unlike < > LIKE or IS
                    n = push(n + 1, "c", (b == 61 or b == 33) and "=" or "<")
                end
                i = j
            elseif b == 33 then
                n = push(n + 1, "!")
                i = i + 1
            elseif b == 58 and b2 == 61 then -- :=
                n = push(n + 1, "c")
                i = i + 2
            elseif b == 43 or b == 45 or b == 42 or b == 47 or b == 37 or b == 94 or b == 124 or b == 38 or b == 126 then
                n = push(n + 1, "o", b == 42 and "*" or nil)
                i = i + 1
            else
                -- a run of other bytes (\\\\, ....) is one token
                if TT[n] ~= "x" or byte(s, i - 1) ~= b then
                    n = push(n + 1, "x")
                end
                i = i + 1
            end
        end
    end
    return n, open
end

-- The rules look a few tokens past the last: those read as nothing.
local function lex(s, i, max)
    lex_s = s
    lex_comment_at = #s + 1
    lex_system = false
    lex_open = false
    local n, open = lex_tokens(s, i, max)
    for k = n + 1, n + 4 do
        TT[k], TV[k] = false, false
    end
    return n, open
end

-- Rule helpers over TT[1..n]. Each returns the index after what it
-- recognised, or nil.

-- Index after the parenthesis group opened at k (or n + 1 when unclosed).
local function skip_group(k, n)
    local depth = 0
    while k <= n do
        local t = TT[k]
        if t == "(" then
            depth = depth + 1
        elseif t == ")" then
            depth = depth - 1
            if depth == 0 then
                return k + 1
            end
        end
        k = k + 1
    end
    return k
end

local OPERAND = { n = true, s = true, v = true, w = true }

-- One operand: a literal, name, variable, call or parenthesised group,
-- after unary operators.
local function operand(k, n)
    local guard = 0
    while (TT[k] == "!" or (TT[k] == "o" and TV[k] ~= "*")) and guard < 32 do
        k = k + 1
        guard = guard + 1
    end
    local t = TT[k]
    if k > n then
        return nil
    elseif OPERAND[t] then
        return k + 1
    elseif t == "f" then
        if TT[k + 1] == "(" then
            return skip_group(k + 1, n)
        end
        return k + 1
    elseif t == "(" then
        return skip_group(k, n)
    end
    return nil
end

-- operand (operator operand)*, bounded.
local function expr(k, n)
    k = operand(k, n)
    local guard = 0
    while k and TT[k] == "o" and guard < 8 do
        local nk = operand(k + 1, n)
        if not nk then
            return k
        end
        k = nk
        guard = guard + 1
    end
    return k
end

-- expr comparison expr: a boolean test, such as 1=1, (8)=(3) or
-- !(1)="1".
-- After a comparison's right side: more of them ('x' = 'x' = 0 = '1).
local function chain(e, n)
    local guard = 0
    while e and TT[e] == "c" and guard < 8 do
        e = expr(e + 1, n)
        guard = guard + 1
    end
    return e
end

local function comparison(k, n)
    local e = expr(k, n)
    if e and TT[e] == "c" then
        return chain(expr(e + 1, n), n)
    end
    local guard = 0
    while (TT[k] == "(" or TT[k] == "!") and guard < 8 do
        k = k + 1
        guard = guard + 1
    end
    e = expr(k, n)
    if e and TT[e] == "c" then
        return chain(expr(e + 1, n), n)
    end
    return nil
end


-- Does a statement start at k (after a ';')? Verbs need the words that
-- make them SQL rather than English ("; drop table", not "; drop by").
local DDL_OBJECTS = { table = true, database = true, schema = true, view = true, procedure = true, ["function"] = true,
    user = true, index = true, trigger = true, login = true }
local function statement(k, n)
    local t, v = TT[k], TV[k]
    local t2, v2 = TT[k + 1], TV[k + 1]
    if t == "S" then
        return t2 == "n" or t2 == "v" or t2 == "f" or t2 == "(" or (t2 == "o" and TV[k + 1] == "*")
            or ((t2 == "w" or t2 == "s") and (TT[k + 2] == "," or TV[k + 2] == "from" or ENDS[TT[k + 2]] == true))
    elseif t ~= "T" then
        return false
    elseif v == "drop" or v == "create" or v == "alter" or v == "truncate" then
        return DDL_OBJECTS[v2] == true or (v == "truncate" and t2 == "w") or (t2 == "w" and TT[k + 2] == "C")
    elseif v == "insert" then
        return v2 == "into"
    elseif v == "update" then
        return t2 == "w" and TV[k + 2] == "set"
    elseif v == "delete" then
        return v2 == "from" or (t2 == "w" and TV[k + 2] == "from")
    elseif v == "exec" or v == "execute" then
        -- a procedure name has a dot or an underscore (sp_who, master..xp_cmdshell)
        return t2 == "v" or t2 == "(" or t2 == "s" or ((t2 == "w" or t2 == "f") and (find(v2, ".", 1, true) or find(v2, "_", 1, true)) ~= nil)
    elseif v == "declare" then
        return t2 == "v"
    elseif v == "waitfor" then
        return t2 == "s"
    elseif v == "load" then
        return v2 == "data" or v2 == "xml"
    elseif v == "do" then
        return t2 == "(" or t2 == "f"
    elseif v == "if" or v == "while" then
        -- MSSQL's IF/WHILE <condition> <statement>, IF [NOT] EXISTS (,
        -- not "; if not, write to"
        return v2 == "exists" or (v2 == "not" and TV[k + 2] == "exists")
            or ((t2 == "n" or t2 == "s" or t2 == "v" or t2 == "(") and comparison(k + 1, n) ~= nil)
    elseif v == "call" then
        return t2 == "f"
    elseif v == "begin" then
        return TT[k + 1] == "T" or v2 == "tran" or v2 == "transaction"
    elseif v == "shutdown" then
        return t2 == nil or k + 1 > n or ENDS[t2] == true
    end
    return false
end

local function union_select(k)
    return TT[k] == "U" and (TT[k + 1] == "S" or (TT[k + 1] == "(" and TT[k + 2] == "S"))
end

-- CASE [x] WHEN ... THEN ... [ELSE ...] END, within a few tokens.
local function case_expr(k, n)
    local t2 = TT[k + 1]
    if not (t2 == "n" or t2 == "s" or t2 == "v" or t2 == "f" or t2 == "(" or TV[k + 1] == "when") then
        return false
    end
    local seen_when, seen_then = false, false
    for j = k + 1, min(n, k + 40) do
        local v = TV[j]
        if TT[j] == "K" then
            if v == "when" then
                seen_when = true
            elseif v == "then" and seen_when then
                seen_then = true
            elseif v == "end" then
                return seen_then
            end
        end
    end
    return false
end

-- Shapes that are SQL wherever they are in the stream.
local function anywhere(n)
    if lex_system then
        return "system name"
    end
    for k = 1, n do
        local t = TT[k]
        if t == "U" then
            if union_select(k) then
                return "union select"
            end
        elseif t == ";" then
            if statement(k + 1, n) then
                return "stacked query"
            end
        elseif t == "f" then
            local v = TV[k]
            if INFO_CALLS[v] and TT[k + 2] == ")" then
                return "information call"
            end
            if SQL_CALLS[v] and TT[k + 2] == "f" and SQL_CALLS[TV[k + 2]] then
                return "nested SQL calls"
            end
            if ERROR_CALLS[v] then
                return "error-based call"
            end
            if (v == "iif" or v == "if") and TT[k + 2] == "n" and TT[k + 3] == "c" and TT[k + 4] == "n"
                    and TT[k + 5] == "," then
                return "conditional call"
            end
            if DELAY_CALLS[v] then
                local a = TT[k + 2]
                if a == "n" or (a == "o" and TT[k + 3] == "n") then
                    return "delay call"
                end
            end
        elseif t == "T" then
            if TV[k] == "waitfor" and TT[k + 1] == "s" then
                return "waitfor"
            end
        elseif t == "S" then
            local t2 = TT[k + 1]
            if t2 == "f" or t2 == "v" or (t2 == "o" and TV[k + 1] == "*") or (t2 == "(" and TT[k + 2] == "S")
                    or TV[k + 1] == "case" then
                return "select expression"
            end
            -- (select (...  and 1 div(select ..., =(select x): a subquery in
            -- an expression
            local t0, t00 = TT[k - 1], TT[k - 2]
            if t2 == "(" and k > 1 and (t0 == "(" or t0 == "o" or t0 == "&" or t0 == "c") then
                return "subquery"
            end
            if t0 == "(" and (t00 == "c" or t00 == "&" or t00 == "o") and TT[k + 2] == ")" then
                return "subquery"
            end
            if t2 == "n" and (TT[k + 2] == "," or TV[k + 2] == "from" or ENDS[TT[k + 2]] or TT[k + 2] == ")"
                    or TT[k + 2] == "K") then
                return "select expression"
            end
            if select_from(k, n) then
                return "select from"
            end
        elseif t == "K" then
            local v = TV[k]
            if v == "into" and (TV[k + 1] == "outfile" or TV[k + 1] == "dumpfile") then
                return "into outfile"
            end
            if v == "case" and case_expr(k, n) then
                return "case expression"
            end
        elseif t == "v" then
            if byte(TV[k], 2) == 64 then -- @@system_variable
                return "system variable"
            end
        elseif t == "w" and TV[k] == "match" then
            -- MATCH col AGAINST (...), MATCH (col) AGAINST (...)
            local j = TT[k + 1] == "(" and skip_group(k + 1, n) or k + 2
            if TV[j] == "against" then
                return "full-text match"
            end
        end
        if t == "S" then
            -- SELECT ... table_name / column_name: the catalogue's columns
            for j = k + 1, min(n, k + 6) do
                local v = TV[j]
                if type(v) == "string" and (find(v, "table_name", 1, true) or find(v, "column_name", 1, true)) then
                    return "select from the catalogue"
                end
            end
        end
    end
    return nil
end

-- Calls after AND/OR that make it SQL (set_debug() and set_mode() is C).
local BOOLEAN_CALLS = { exists = true }
for k in pairs(SQL_CALLS) do
    BOOLEAN_CALLS[k] = true
end
for k in pairs(DELAY_CALLS) do
    BOOLEAN_CALLS[k] = true
end

-- What ends an expression in working SQL: the end of the input (in a
-- quoted context only with a string the application's quote closes), a
-- comment, the next statement, a logical operator, a parenthesis, a clause.
local function ends_expr(e, n, quoted, open, q)
    if not e then
        return false
    end
    if e > n then
        return not quoted or open == q
    end
    local t = TT[e]
    -- a dangling operator at the very end (or 1=1-) changes nothing; a
    -- comment with words in it ends a quoted context only
    return t == ";" or t == "&" or t == ")" or t == "K" or t == "U" or (t == "C" and (quoted or TV[e] == true))
        or (t == "o" and e == n)
end

-- s[i..j] is at most one word of letters and digits, spaces around it.
local function one_word(s, i, j)
    local seen, gap = false, false
    for k = i, j do
        local b = byte(s, k)
        if SPACE[b] then
            gap = seen
        elseif (seen and gap) or not ALNUM[b] then
            return false
        else
            seen = true
        end
    end
    return true
end

-- What is around the operator of "x' - 'y" is at most a word each: the
-- text before the first quote and the open string's content.
local function short_strings(s, open_at)
    local q1 = find(s, "'", 1, true)
    return q1 ~= nil and q1 <= 24 and one_word(s, 1, q1 - 1) and #s - open_at <= 24 and one_word(s, open_at + 1, #s)
end

-- The stream continues the application's SQL after a breakout (or after
-- the bare value at its start) with structure. quoted: the stream begins
-- right after the attacker's closing quote (of byte q); open: lex's second
-- result. Returns a reason and whether it is one of the strong ones.
local function breakout(k, n, quoted, open, q)
    while TT[k] == ")" do
        k = k + 1
    end
    if k > n then
        return nil
    end
    local t = TT[k]
    if quoted and q == B_QUOTE and k == 1 and n >= 2 and n <= 8 and TT[n] == "s" and lex_open == q
            and (t == "c" or t == "o" or t == "&") and short_strings(lex_s, lex_open_at) then
        -- x' - 'y, a '<' b, '&&', aa'|!'aa: MySQL's implicit conversions
        local unary = true
        for j = 2, n - 1 do
            unary = unary and TT[j] == "!"
        end
        if unary then
            return "operator between strings"
        end
    end
    if quoted and t == "o" then
        -- '-0-', '+(select 1)+', '-(1 or 2) and 1=0: arithmetic on a
        -- number, call or group, not on search words ("36"+X+48+"), but
        -- on names after a single quote (1'*id-'0).
        local j = k + 1
        while (TT[j] == "o" and TV[j] ~= "*") or TT[j] == "!" do
            j = j + 1
        end
        local t2 = TT[j]
        local e = (t2 == "n" or t2 == "f" or t2 == "(" or t2 == "v" or (q == B_QUOTE and (t2 == "w" or t2 == "s")))
            and expr(k + 1, n)
        if not e then
            return nil
        end
        if TT[e] == "c" and ends_expr(chain(expr(e + 1, n), n), n, quoted, open, q) then
            return "comparison after quote"
        end
        if t2 ~= "s" and t2 ~= "w" and (TT[e] == "o" or (e > n and open == q)) then
            return "expression after quote"
        end
        if (t2 == "s" or t2 == "w") and TT[e] == "o" and ends_expr(expr(e + 1, n), n, quoted, open, q) then
            return "expression after quote"
        end
        if (t2 == "s" or t2 == "w") and e > n and lex_open == q and short_strings(lex_s, lex_open_at) then
            -- 1'*column-0-'0: two operators or more, closed by the
            -- application's quote
            local ops = 0
            for x = k, n do
                ops = ops + (TT[x] == "o" and 1 or 0)
            end
            if ops >= 2 then
                return "expression after quote"
            end
        end
        while TT[e] == ")" do
            e = e + 1
        end
        if e > n then
            return nil
        end
        k, t = e, TT[e]
    end
    if t == "&" or t == "!" then
        local c = comparison(k + 1, n)
        -- after a quote the comparison may end the input too (' or id > 1)
        local last = TT[n]
        if ends_expr(c, n, quoted, open, q) or (quoted and c and c > n and (last == "n" or last == "s" or last == "v")) then
            return "boolean comparison", true
        end
        if t == "!" then
            return nil
        end
        local j = k + 1
        while TT[j] == "(" or TT[j] == "!" do
            j = j + 1
        end
        local tj = TT[j]
        if tj == "f" and BOOLEAN_CALLS[TV[j]] then
            return "boolean call", true
        elseif tj == "S" then
            return "boolean subquery", true
        end
        local e = expr(k + 1, n)
        local guard = 0
        while e and (TT[e] == ")" or (TT[e] == "&" and guard < 8)) do
            -- or 'a' xor 'b', or x && '1
            if TT[e] == "&" then
                e = expr(e + 1, n)
                guard = guard + 1
            else
                e = e + 1
            end
        end
        if not e or (TT[e - 1] == "w" and TT[e] ~= "C") then
            return nil
        end
        local te, ve = TT[e], TV[e]
        if te == "C" and (TV[e] or quoted) then
            -- ' and (false)--: the comment makes it unambiguous
            return "boolean literal", true
        end
        if (te == ";" and (e == n or TT[e + 1] == "C"))
                or (te == "K" and (ve == "group by" or ve == "order by" or ve == "having" or ve == "limit"))
                or (quoted and e > n and (open == q or TT[e - 1] == "n"
                    or (lex_open and TT[n] == "s" and not has_space(lex_s, lex_open_at + 1)))) then
            return "boolean literal"
        end
        return nil
    elseif t == ";" then
        if statement(k + 1, n) then
            return "stacked query", true
        end
        if quoted and (TT[k + 1] == "C" or (TT[n] == "C" and TV[n])) then
            -- '; -- and '; anything: goto x -- -a
            return "stacked query"
        end
    elseif quoted and q == B_QUOTE and t == "s" and TT[k + 1] == "c" then
        -- x' 'a'='a: adjacent strings concatenate, then compare
        if ends_expr(chain(expr(k + 2, n), n), n, quoted, open, q) then
            return "comparison after quote"
        end
    elseif t == "U" then
        local t2 = TT[k + 1]
        -- union select, or a number's UNION with nothing or a list after it
        if union_select(k) or t2 == "n" or (t2 == "C" and TV[k + 1]) or ((quoted or TT[k - 1] == "n")
                and (k + 1 > n or t2 == "C" or t2 == "(")) then
            return "union", true
        end
    elseif t == "C" then
        -- admin'--, not a quoted "--" (boundary="--".)
        if TV[k] and (quoted or k > 1) and not (quoted and find(lex_s, char(q), lex_comment_at, true)) then
            return quoted and "comment after quote" or "comment after value"
        end
    elseif t == "K" then
        local v, t2 = TV[k], TT[k + 1]
        if v == "order by" or v == "group by" then
            if (t2 == "n" or t2 == "w") and (k + 2 > n or ENDS[TT[k + 2]] or TT[k + 2] == "," or TT[k + 2] == "K") then
                return "clause", true
            end
            if t2 == "f" then
                return "clause", true
            end
        elseif v == "having" or v == "where" then
            if ends_expr(comparison(k + 1, n), n, quoted, open, q) then
                return "clause", true
            end
            local e = expr(k + 1, n)
            if v == "having" and e and (k + 1 > n or TT[k + 1] == "(") then
                return "clause", true
            end
        elseif v == "from" then
            -- ...) from users where ...
            local t3 = TT[k + 2]
            if t2 == "w" and t3 == "K" and (TV[k + 2] == "where" or TV[k + 2] == "limit" or TV[k + 2] == "order by"
                    or TV[k + 2] == "group by" or TV[k + 2] == "join") then
                return "clause", true
            end
        elseif v == "procedure" then
            if t2 == "f" then
                return "clause", true
            end
        elseif v == "limit" then
            if t2 == "n" and (ENDS[TT[k + 2]] or (TT[k + 2] == "," and TT[k + 3] == "n")) then
                return "clause", true
            end
        end
    elseif quoted and (t == "T" or t == "S") then
        -- MSSQL runs a statement after a string without a ';'.
        if statement(k, n) then
            return "statement after quote", true
        end
    elseif quoted and t == "c" and (TV[k] == "=" or q == B_QUOTE) then
        -- ' = 1--, '='; after a single quote LIKE, BETWEEN, SOUNDS LIKE too
        if ends_expr(chain(expr(k + 1, n), n), n, quoted, open, q) then
            return "comparison after quote"
        end
    end
    return nil
end

-- The bare-value context: a leading value (an expression: 1, -1, x*1,
-- (1), pi()), then breakout rules. A comment right after it counts only
-- when the value has SQL in it or is a number.
local function bare(n)
    local v1 = TV[1]
    if TT[1] == "T" and v1 ~= "replace" and v1 ~= "call" and v1 ~= "do" and v1 ~= "begin" and v1 ~= "if"
            and v1 ~= "while" and statement(1, n) then
        return "statement"
    end
    local e = expr(1, n)
    if not e then
        return breakout(1, n, false, nil, nil)
    end
    -- 1=1 and..., (1) in (binary 'b') --, 1=1;: a literal or a group on
    -- the left (not "it is ... and", "a=b and")
    local t1 = TT[1]
    local left = (t1 == "n" or t1 == "s" or t1 == "v") and 2 or (t1 == "(" and skip_group(1, n))
    if left and TT[left] == "c" then
        local c = expr(left + 1, n)
        if c and ((TT[c] == "C" and TV[c]) or TT[c] == ";" or TT[c] == "&") then
            return "comparison"
        end
    end
    local why = breakout(e, n, false, nil, nil)
    if why == "comment after value" then
        -- 1--, -1--, (1)--, 1*1--, 1 or x-- but not 1611-xyz--
        local sql = TT[1] == "(" or (TT[1] == "n" and e == 2) or (TT[1] == "o" and TT[2] == "n" and e == 3)
        local numbers = true
        for j = 1, e - 1 do
            local t = TT[j]
            sql = sql or t == "&" or t == "f" or t == "v"
            numbers = numbers and (t == "n" or t == "o")
        end
        if not (sql or numbers) then
            return nil
        end
    end
    if not why and TT[1] == "n" then
        -- 1 - ord('a'), 234 + (1 / ascii(substring(...)))
        for j = 2, e - 1 do
            if TT[j] == "f" and SQL_CALLS[TV[j]] then
                return "arithmetic on SQL calls"
            end
        end
    end
    return why
end

-- Upper bound on the tokens a quoted context is followed for beyond the
-- first quote of each kind: its rules need the first few.
local SHORT = 24
local FULL = 1e9

local QUOTES = { "'", '"' }

-- Returns a short reason when the lower-cased s reads as an injection,
-- else nil.
function _M.detect(s)
    if find(s, "sp_password", 1, true) then
        -- hides the statement from MSSQL's log
        return "sp_password"
    end
    if find(s, "/*!", 1, true) then
        -- MySQL's executable comment: only SQL has it
        return "executable comment"
    end
    local u = find(s, "union", 1, true)
    if u and u > 1 and byte(s, u - 1) ~= 32 then
        -- 1.union, 1funion, 0xunion: MySQL ends a number there
        if find(s, "[%d.][%.fdex]?union[%s%(]+select") then
            return "union select"
        end
    end
    local n = lex(s, 1, FULL)
    local why = bare(n) or anywhere(n)
    if why then
        return why
    end
    for _, q in ipairs(QUOTES) do
        local qb = byte(q)
        local pos = 0
        for nth = 1, 3 do
            pos = find(s, q, pos + 1, true)
            if not pos then
                break
            end
            local open, strong
            n, open = lex(s, pos + 1, nth == 1 and FULL or SHORT)
            why, strong = breakout(1, n, true, open, qb)
            -- Past the first quote only the unambiguous shapes count: text
            -- with quotes in it has every short shape somewhere.
            if why and (nth == 1 or strong) then
                return why
            end
            why = anywhere(n)
            if why then
                return why
            end
        end
    end
    return nil
end

_M.lower = lower

return _M
