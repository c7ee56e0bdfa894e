-- Go regexp (RE2 syntax) matching in time linear in the subject, for
-- ua_check's custom patterns (DATAPLANE 2.5): the server validates them as
-- Go regexps, and PCRE's backtracking let one of them cost a worker
-- milliseconds per request.
--
-- compile(patterns) parses each pattern, builds one Thompson NFA for as
-- many of them as fit a size cap (the node only asks whether any pattern
-- matches, so one pass over the User-Agent serves all of them), and
-- returns a matcher for match(m, s), which answers what Go's
-- regexp.MatchString answers for every pattern it took, on any byte string.
-- A pattern it refuses (syntax it does not implement, such as \p{Greek} or
-- (?i) on most non-ASCII letters, or an NFA over the cap) is returned with
-- the reason, for the caller to run some other way.
--
-- match walks a DFA built lazily over the NFA: a DFA state is the set of
-- NFA states reached after a character plus what kind of character that
-- was (start of text, newline, word, other), which is all that ^, $, \b and
-- their (?m) forms look at besides the next character. Unless the
-- patterns are anchored at the start of text, every state also holds the
-- entry, implicitly (its closure is worked out once). A missing
-- transition costs one pass over the NFA; the states are cached per
-- matcher, and the cache is emptied when full, so any subject costs at most
-- its length times the NFA's size, and a cached path a table read per
-- character.
--
-- Subjects are read as Go reads them: UTF-8 runes, a byte that does not
-- start a valid sequence being one U+FFFD; runes go through a 128-entry
-- table (ASCII) or a binary search (remembered per rune) to the character
-- class that the NFA tells apart.

local bit = require("bit")

local byte = string.byte
local concat = table.concat
local sort = table.sort
local error = error
local ipairs = ipairs
local pcall = pcall
local tonumber = tonumber
local rshift = bit.rshift
local band, bor, bnot = bit.band, bit.bor, bit.bnot
local find = string.find
local match = string.match
local sub = string.sub
local huge = math.huge

local ok_new, new_tab = pcall(require, "table.new")
if not ok_new then
    new_tab = function()
        return {}
    end
end

local _M = {}

local MAX_RUNE = 0x10FFFF
local BAD = 0xFFFD

-- NFA instructions (a pattern of 256 bytes with counted repeats may expand
-- far; Go allows counts of up to 1000). A missing DFA transition walks the
-- NFA states it holds, which MAX_INSTS per pattern bounds: block-list
-- patterns hold a few dozen (2 to 4 us a transition), while a pattern of a
-- thousand states that keeps hundreds of them live at once, such as
-- a[ab]{0,600}c on a random string of a's and b's, costs 15 to 50 us.
-- GROUP_INSTS is what patterns sharing one DFA may add up to. More would
-- make one DFA read the subject instead of several (32 wide patterns fill
-- eleven: 600 us for an 8 KB subject), but a DFA's class tables grow as its
-- range sets times its character classes: 32 patterns of many ranges took
-- 15 MB of a worker in one DFA, 6.7 MB in sixteen. What the DFAs' misses
-- cost a request is the caller's budget either way (match).
local MAX_INSTS = 2000
local GROUP_INSTS = 4000
-- The DFA cache: at most MAX_STATES states holding MAX_KERNEL NFA states
-- between them, per matcher and worker, then it starts afresh.
local MAX_STATES = 2000
local MAX_KERNEL = 100000
-- ...and at most MAX_SLOTS transition slots: a state has one per character
-- class, and patterns of many ranges make hundreds of classes (a state
-- of 1 700 is 13 KB).
local MAX_SLOTS = 262144

-- Instruction ops.
local CHAR, SPLIT, ASSERT, MATCH = 1, 2, 3, 4
-- Character kinds, of the one before a position (0: none, the start of
-- text) and the one after it (0: none, the end of text).
local NL, WORD, OTHER = 1, 2, 3
-- Assertions, and for each the (before, after) kind pairs where it holds,
-- indexed before * 4 + after.
local A_BOT, A_BOL, A_EOT, A_EOL, A_WB, A_NWB = 1, 2, 3, 4, 5, 6
local HOLDS = {}
for kind = 1, 6 do
    local t = {}
    for p = 0, 3 do
        for n = 0, 3 do
            local wb = (p == WORD) ~= (n == WORD)
            t[p * 4 + n] = ({ p == 0, p == 0 or p == NL, n == 0, n == 0 or n == NL, wb, not wb })[kind]
        end
    end
    HOLDS[kind] = t
end

-- Flags.
local F_I, F_M, F_S = 1, 2, 4

---------------------------------------------------------------------------
-- Rune sets: flat arrays of inclusive ranges lo1, hi1, lo2, hi2, ...

-- r sorted and with overlapping or adjacent ranges merged.
local function norm(r)
    local pairs_ = {}
    for k = 1, #r, 2 do
        pairs_[#pairs_ + 1] = { r[k], r[k + 1] }
    end
    sort(pairs_, function(a, b) return a[1] < b[1] end)
    local out = {}
    for _, p in ipairs(pairs_) do
        local n = #out
        if n > 0 and p[1] <= out[n] + 1 then
            if p[2] > out[n] then
                out[n] = p[2]
            end
        else
            out[n + 1], out[n + 2] = p[1], p[2]
        end
    end
    return out
end

local function negate(r)
    local out, from = {}, 0
    for k = 1, #r, 2 do
        if r[k] > from then
            out[#out + 1], out[#out + 2] = from, r[k] - 1
        end
        from = r[k + 1] + 1
    end
    if from <= MAX_RUNE then
        out[#out + 1], out[#out + 2] = from, MAX_RUNE
    end
    return out
end

local function has(r, c)
    for k = 1, #r, 2 do
        if c >= r[k] and c <= r[k + 1] then
            return true
        end
    end
    return false
end

local function append(dst, src)
    for k = 1, #src do
        dst[#dst + 1] = src[k]
    end
    return dst
end

-- Non-ASCII runes that simple case folding leaves alone (CJK, Hangul,
-- emoji blocks): the only non-ASCII runes (?i) may meet here, besides the
-- two that fold to ASCII letters, as there is no Unicode table to fold the
-- others with.
local CASELESS = { 0x3000, 0x9FFF, 0xAC00, 0xD7FF, 0x1F000, 0x1FAFF }
local KELVIN, LONG_S = 0x212A, 0x17F

-- r (normalized) closed under Go's simple case folding, or an error.
local function fold(r)
    local out = {}
    for k = 1, #r, 2 do
        local lo, hi = r[k], r[k + 1]
        out[#out + 1], out[#out + 2] = lo, hi
        -- A range holding every non-ASCII rune is closed already.
        if hi > 0x7F and not (lo <= 0x80 and hi == MAX_RUNE) then
            local a = lo > 0x80 and lo or 0x80
            local ok = a == hi and (a == KELVIN or a == LONG_S)
            for j = 1, #CASELESS, 2 do
                ok = ok or (a >= CASELESS[j] and hi <= CASELESS[j + 1])
            end
            if not ok then
                error("(?i) on non-ASCII runes is not supported", 0)
            end
        end
        local a, b = lo > 65 and lo or 65, hi < 90 and hi or 90
        if a <= b then
            out[#out + 1], out[#out + 2] = a + 32, b + 32
        end
        a, b = lo > 97 and lo or 97, hi < 122 and hi or 122
        if a <= b then
            out[#out + 1], out[#out + 2] = a - 32, b - 32
        end
    end
    out = norm(out)
    local extra = {}
    if has(out, 0x6B) or has(out, KELVIN) then
        append(extra, { 0x4B, 0x4B, 0x6B, 0x6B, KELVIN, KELVIN })
    end
    if has(out, 0x73) or has(out, LONG_S) then
        append(extra, { 0x53, 0x53, 0x73, 0x73, LONG_S, LONG_S })
    end
    return norm(append(out, extra))
end

local WORDSET = { 48, 57, 65, 90, 95, 95, 97, 122 }
local POSIX = {
    alnum = { 48, 57, 65, 90, 97, 122 }, alpha = { 65, 90, 97, 122 }, ascii = { 0, 127 },
    blank = { 9, 9, 32, 32 }, cntrl = { 0, 31, 127, 127 }, digit = { 48, 57 }, graph = { 33, 126 },
    lower = { 97, 122 }, print = { 32, 126 }, punct = { 33, 47, 58, 64, 91, 96, 123, 126 },
    space = { 9, 13, 32, 32 }, upper = { 65, 90 }, word = WORDSET, xdigit = { 48, 57, 65, 70, 97, 102 },
}
local PERL = { d = POSIX.digit, s = { 9, 10, 12, 13, 32, 32 }, w = WORDSET }

---------------------------------------------------------------------------
-- UTF-8, as Go's utf8.DecodeRune: the rune at i of s (whose byte there, b,
-- is at least 0x80) and its length, or U+FFFD and 1.
local function decode(s, i, b)
    if b < 0xC2 or b > 0xF4 then
        return BAD, 1
    end
    local b1 = byte(s, i + 1)
    if not b1 then
        return BAD, 1
    end
    if b < 0xE0 then
        if b1 < 0x80 or b1 > 0xBF then
            return BAD, 1
        end
        return (b - 0xC0) * 64 + b1 - 0x80, 2
    end
    local lo, hi = 0x80, 0xBF
    if b == 0xE0 then
        lo = 0xA0
    elseif b == 0xED then
        hi = 0x9F
    elseif b == 0xF0 then
        lo = 0x90
    elseif b == 0xF4 then
        hi = 0x8F
    end
    if b1 < lo or b1 > hi then
        return BAD, 1
    end
    local b2 = byte(s, i + 2)
    if not b2 or b2 < 0x80 or b2 > 0xBF then
        return BAD, 1
    end
    if b < 0xF0 then
        return (b - 0xE0) * 4096 + (b1 - 0x80) * 64 + b2 - 0x80, 3
    end
    local b3 = byte(s, i + 3)
    if not b3 or b3 < 0x80 or b3 > 0xBF then
        return BAD, 1
    end
    return (b - 0xF0) * 262144 + (b1 - 0x80) * 4096 + (b2 - 0x80) * 64 + b3 - 0x80, 4
end
_M.decode = decode

---------------------------------------------------------------------------
-- Parser: Go's regexp/syntax with the Perl flags regexp.Compile uses. The
-- tree's nodes: { "set", ranges }, { "cat", nodes }, { "alt", nodes },
-- { "rep", min, max (-1: none), node }, { "assert", kind }.

local ESCAPES = { [0x61] = 7, [0x66] = 12, [0x6E] = 10, [0x72] = 13, [0x74] = 9, [0x76] = 11 }
local ASSERTS = { [0x41] = A_BOT, [0x7A] = A_EOT, [0x62] = A_WB, [0x42] = A_NWB }
local FLAGS = { i = F_I, m = F_M, s = F_S, U = 0 }

local function parse(p)
    local pos, n = 1, #p
    local flags = 0

    local function fail(what)
        error(what .. " at byte " .. pos, 0)
    end

    -- The pattern's rune at pos (then past it).
    local function rune()
        local b = byte(p, pos)
        local r, w = b, 1
        if b >= 0x80 then
            r, w = decode(p, pos, b)
            if r == BAD and w == 1 then
                fail("invalid UTF-8")
            end
        end
        pos = pos + w
        return r
    end

    -- The rune an escape (pos at the backslash) stands for, outside a
    -- class or in one; the Perl classes and the like are the callers'.
    local function escape()
        local c = byte(p, pos + 1) or fail("trailing backslash")
        pos = pos + 2
        if c >= 0x30 and c <= 0x37 then
            -- \0 and \0NN, \NN and \NNN octal; a lone \1 to \7 would be a
            -- back reference, which Go refuses.
            local digits = match(p, "^[0-7][0-7]?[0-7]?", pos - 1)
            if #digits == 1 and c ~= 0x30 then
                fail("back references are not supported")
            end
            pos = pos - 1 + #digits
            return tonumber(digits, 8)
        end
        if c == 0x78 then -- \x{h...} or \xhh
            local h, after = match(p, "^{(%x+)}()", pos)
            if not h then
                h, after = match(p, "^%x%x", pos), pos + 2
            end
            local v = h and tonumber(h, 16)
            if not v or v > MAX_RUNE then
                fail("invalid escape")
            end
            pos = after
            return v
        end
        if ESCAPES[c] or c < 0x80 and not find(string.char(c), "%w") then
            return ESCAPES[c] or c -- or punctuation, itself
        end
        fail("invalid escape \\" .. string.char(c))
    end

    -- An item's set, folded under (?i) and negated after folding, as Go
    -- folds a group before negating it.
    local function item(set, negated)
        if band(flags, F_I) ~= 0 then
            set = fold(set)
        end
        return negated and negate(set) or set
    end

    -- The set of a Perl class at pos (\d \s \w and their negations), or nil.
    local function perl_class()
        local c = byte(p, pos + 1)
        if c == 0x70 or c == 0x50 then -- \p \P
            fail("Unicode classes are not supported")
        end
        local set = c and PERL[string.char(bor(c, 0x20))]
        if set then
            pos = pos + 2
            return item(set, c < 0x61)
        end
    end

    local function class()
        local negated = byte(p, pos + 1) == 0x5E
        pos = pos + (negated and 2 or 1)
        local out, first = {}, true
        -- A "]" first is a literal.
        while first or byte(p, pos) ~= 0x5D do
            first = false
            local c = byte(p, pos) or fail("missing closing ]")
            local neg, name, after = match(p, "^%[:(%^?)(%a+):%]()", pos)
            local set
            if name then
                set, pos = item(POSIX[name] or fail("invalid character class range"), neg == "^"), after
            elseif c == 0x5C then
                set = perl_class()
            end
            if not set then
                local lo = c == 0x5C and escape() or rune()
                local hi = lo
                if byte(p, pos) == 0x2D and (byte(p, pos + 1) or 0x5D) ~= 0x5D then
                    pos = pos + 1
                    hi = byte(p, pos) == 0x5C and escape() or rune()
                    if hi < lo then
                        fail("invalid character class range")
                    end
                end
                set = item({ lo, hi }, false)
            end
            append(out, set)
        end
        pos = pos + 1
        out = norm(out)
        return { "set", negated and negate(out) or out }
    end

    local function literal(r)
        return { "set", item({ r, r }, false) }
    end

    -- "{n}", "{n,}" or "{n,m}" at pos: min, max (-1: none) and the position
    -- after it, or nil (then "{" is a literal, as is one with a count Go
    -- does not read, with a leading zero).
    local function counts()
        local a, comma, b, after = match(p, "^{(%d+)(,?)(%d*)}()", pos)
        if not a or match(a, "^0%d") or match(b, "^0%d") then
            return nil
        end
        local lo, hi = tonumber(a), comma == "" and tonumber(a) or tonumber(b) or -1
        if lo > 1000 or hi > 1000 or (hi >= 0 and lo > hi) then
            fail("invalid repeat count")
        end
        return lo, hi, after
    end

    local alternation

    -- A group, pos at "(": its node, or nil for a flags-only group.
    local function group()
        local named = match(p, "^%(%?P?<[%w_]+>()", pos)
        if named or byte(p, pos + 1) ~= 0x3F then
            pos = named or pos + 1
            return alternation(true)
        end
        -- Flags: (?flags) sets them for the rest of the enclosing group,
        -- (?flags:re) for re only. "-" clears those after it, at least one.
        pos = pos + 2
        local f, sign, saw = flags, 1, false
        while true do
            local c = sub(p, pos, pos)
            pos = pos + 1
            if FLAGS[c] then
                f = sign > 0 and bor(f, FLAGS[c]) or band(f, bnot(FLAGS[c]))
                saw = true
            elseif c == "-" and sign > 0 then
                sign, saw = -1, false
            elseif (c == ":" or c == ")") and (sign > 0 or saw) then
                if c == ")" then
                    flags = f
                    return nil
                end
                local saved = flags
                flags = f
                local node = alternation(true)
                flags = saved
                return node
            else
                fail("invalid or unsupported Perl syntax")
            end
        end
    end

    -- Alternatives up to the end of the pattern or, in a group, its ")".
    -- Flags set in a group end with it.
    function alternation(in_group)
        local saved = flags
        local alts, items = {}, {}
        while true do
            local c = byte(p, pos)
            local lo, hi, after
            if c == 0x2A or c == 0x2B or c == 0x3F then -- * + ?
                lo, hi, after = c == 0x2B and 1 or 0, c == 0x3F and 1 or -1, pos + 1
            elseif c == 0x7B then
                lo, hi, after = counts()
            end
            if not c or c == 0x7C or c == 0x29 then -- end | )
                alts[#alts + 1] = #items == 1 and items[1] or { "cat", items }
                items = {}
                pos = pos + 1
                if c ~= 0x7C then
                    if (c == 0x29) ~= in_group then
                        fail(in_group and "missing closing )" or "unexpected )")
                    end
                    break
                end
            elseif lo then
                if #items == 0 then
                    fail("missing argument to repetition operator")
                end
                -- Lazy or not, the same for whether it matches.
                pos = byte(p, after) == 0x3F and after + 1 or after
                items[#items] = { "rep", lo, hi, items[#items] }
            elseif c == 0x28 then
                items[#items + 1] = group()
            elseif c == 0x5B then
                items[#items + 1] = class()
            elseif c == 0x2E then
                pos = pos + 1
                items[#items + 1] = { "set", band(flags, F_S) ~= 0 and { 0, MAX_RUNE } or { 0, 9, 11, MAX_RUNE } }
            elseif c == 0x5E or c == 0x24 then
                pos = pos + 1
                local m = band(flags, F_M) ~= 0
                items[#items + 1] = { "assert", c == 0x5E and (m and A_BOL or A_BOT) or (m and A_EOL or A_EOT) }
            elseif c == 0x5C and ASSERTS[byte(p, pos + 1)] then
                items[#items + 1] = { "assert", ASSERTS[byte(p, pos + 1)] }
                pos = pos + 2
            elseif c == 0x5C and byte(p, pos + 1) == 0x51 then -- \Q...\E
                local stop = find(p, "\\E", pos + 2, true)
                pos = pos + 2
                while pos <= (stop or n + 1) - 1 do
                    items[#items + 1] = literal(rune())
                end
                pos = stop and stop + 2 or n + 1
            elseif c == 0x5C then
                local set = perl_class()
                items[#items + 1] = set and { "set", set } or literal(escape())
            else
                items[#items + 1] = literal(rune())
            end
        end
        flags = saved
        return #alts == 1 and alts[1] or { "alt", alts }
    end

    return alternation(false)
end

---------------------------------------------------------------------------
-- NFA: instructions op, x, y in flat arrays. CHAR: set y, then x. SPLIT: x
-- or y. ASSERT: kind y, then x. Built back to front, each node given the
-- instruction that follows it, so nothing needs patching but loops.

local function new_prog()
    return { n = 1, op = { MATCH }, x = { 0 }, y = { 0 }, sets = {}, set_of = {}, cap = 0 }
end

local function emit(prog, op, x, y)
    local n = prog.n + 1
    if n > prog.cap then
        error("more than " .. MAX_INSTS .. " NFA states", 0)
    end
    prog.n = n
    prog.op[n], prog.x[n], prog.y[n] = op, x, y
    return n
end

local function set_id(prog, ranges)
    local key = concat(ranges, ",")
    local id = prog.set_of[key]
    if not id then
        id = #prog.sets + 1
        prog.sets[id] = ranges
        prog.set_of[key] = id
    end
    return id
end

local function emit_node(prog, node, nxt)
    local t = node[1]
    if t == "set" then
        return emit(prog, CHAR, nxt, set_id(prog, node[2]))
    elseif t == "cat" then
        local list = node[2]
        for k = #list, 1, -1 do
            nxt = emit_node(prog, list[k], nxt)
        end
        return nxt
    elseif t == "alt" then
        local list = node[2]
        local e = emit_node(prog, list[#list], nxt)
        for k = #list - 1, 1, -1 do
            e = emit(prog, SPLIT, emit_node(prog, list[k], nxt), e)
        end
        return e
    elseif t == "assert" then
        return emit(prog, ASSERT, nxt, node[2])
    end
    local lo, hi, body = node[2], node[3], node[4]
    local e = nxt
    if hi < 0 then
        -- A loop: the last copy may go round again.
        local loop = emit(prog, SPLIT, 0, nxt)
        local first = emit_node(prog, body, loop)
        prog.x[loop] = first
        if lo == 0 then
            return loop
        end
        e, lo = first, lo - 1
    else
        for _ = 1, hi - lo do
            e = emit(prog, SPLIT, emit_node(prog, body, e), nxt)
        end
    end
    for _ = 1, lo do
        e = emit_node(prog, body, e)
    end
    return e
end

---------------------------------------------------------------------------
-- Character classes: the runes split into intervals that no set's range
-- boundary cuts, intervals in the same sets (and of the same kind) being
-- one class. The DFA's transitions are per class.

-- The index of the last of the sorted starts[1..n] at or below r: the
-- interval holding rune r.
local function interval(starts, n, r)
    local lo, hi = 1, n
    while lo < hi do
        local m = rshift(lo + hi + 1, 1)
        if starts[m] <= r then
            lo = m
        else
            hi = m - 1
        end
    end
    return lo
end

local function classes(prog)
    local cuts = { 0, 10, 11, 48, 58, 65, 91, 95, 96, 97, 123, 0x80 }
    for _, r in ipairs(prog.sets) do
        for k = 1, #r, 2 do
            cuts[#cuts + 1] = r[k]
            if r[k + 1] < MAX_RUNE then
                cuts[#cuts + 1] = r[k + 1] + 1
            end
        end
    end
    sort(cuts)
    local starts = {}
    for _, c in ipairs(cuts) do
        if c ~= starts[#starts] then
            starts[#starts + 1] = c
        end
    end
    local nint = #starts
    local function at(c)
        return interval(starts, nint, c)
    end
    local sig = {}
    for k = 1, nint do
        local c = starts[k]
        sig[k] = { c == 10 and NL or has(WORDSET, c) and WORD or OTHER }
    end
    for id, r in ipairs(prog.sets) do
        for k = 1, #r, 2 do
            for j = at(r[k]), at(r[k + 1]) do
                local s = sig[j]
                s[#s + 1] = id
            end
        end
    end
    local cls_of, ncls, member, kind = {}, 0, {}, {}
    local icls = {}
    for id = 1, #prog.sets do
        member[id] = {}
    end
    for k = 1, nint do
        local key = concat(sig[k], ",")
        local c = cls_of[key]
        if not c then
            ncls = ncls + 1
            c = ncls
            cls_of[key] = c
            kind[c] = sig[k][1]
            for j = 2, #sig[k] do
                member[sig[k][j]][c] = true
            end
        end
        icls[k] = c
    end
    local ascii = {}
    for b = 0, 127 do
        ascii[b] = icls[at(b)]
    end
    -- Non-ASCII runes: the interval starts from 0x80 on, and their classes.
    local hi_start, hi_cls = {}, {}
    for k = at(0x80), nint do
        hi_start[#hi_start + 1] = starts[k]
        hi_cls[#hi_cls + 1] = icls[k]
    end
    return ascii, hi_start, hi_cls, member, kind, ncls
end

---------------------------------------------------------------------------
-- Matchers.

-- Transitions' two outcomes that end a search.
local FOUND, DEAD = {}, {}
local EMPTY = {}

local marks, gen, stack = {}, 0, {}
-- What computing transitions has cost so far: instructions walked, copied
-- and compared, and slots of new states (search charges the difference).
local spent = 0

-- Adds to chars the CHARs reachable from kernel without reading a
-- character, between characters of the kinds in ctx (before * 4 + after),
-- skipping instructions marked in this generation. True when MATCH is
-- reachable.
local function walk(g, kernel, ctx, chars)
    local op, x, y = g.op, g.x, g.y
    local sp, nc = 0, #chars
    for k = #kernel, 1, -1 do
        sp = sp + 1
        stack[sp] = kernel[k]
    end
    local pops = 0
    while sp > 0 do
        local pc = stack[sp]
        sp = sp - 1
        pops = pops + 1
        if marks[pc] ~= gen then
            marks[pc] = gen
            local o = op[pc]
            if o == CHAR then
                nc = nc + 1
                chars[nc] = pc
            elseif o == SPLIT then
                stack[sp + 1], stack[sp + 2] = y[pc], x[pc]
                sp = sp + 2
            elseif o == ASSERT then
                if HOLDS[y[pc]][ctx] then
                    sp = sp + 1
                    stack[sp] = x[pc]
                end
            else
                spent = spent + pops
                return true
            end
        end
    end
    spent = spent + pops
    return false
end

-- The CHARs reachable from st before a character of kind nxt (0: the end
-- of text), or true when MATCH is; cached in st. Unanchored, the entry's
-- (worked out once, in build) are among them, a match being able to start
-- anywhere.
local function closure(g, st, nxt)
    local chars = st.closures[nxt]
    if chars ~= nil then
        return chars
    end
    local ctx = st.prev * 4 + nxt
    local implicit = g.implicit and g.implicit[ctx] or EMPTY
    gen = gen + 1
    chars = implicit
    if implicit ~= true then
        chars = {}
        for k = 1, #implicit do
            chars[k] = implicit[k]
            marks[implicit[k]] = gen
        end
        spent = spent + #implicit
        if walk(g, st.kernel, ctx, chars) then
            chars = true
        end
    end
    st.closures[nxt] = chars
    return chars
end

local function flush(g)
    g.states, g.nstates, g.nkernel = {}, 0, 0
    g.start = nil
end

-- A state is known by its kernel as a set, found through the sum of its
-- members' weights (pseudo-random integers below 2^31, per instruction;
-- the sums stay exact in a double) and told apart from others of that sum
-- by their members. Sorting the kernel and joining it into a string key
-- cost three quarters of a transition on a kernel of a thousand states.
local weight, seed = {}, 1

-- The cached state for kernel after a character of kind prev. Every member
-- of kernel, and nothing else, is marked with the current generation, and
-- sum is the sum of their weights.
local function state(g, kernel, prev, sum)
    local n = #kernel
    if n == 0 and g.anchored then
        return DEAD
    end
    prev = g.pnorm[prev]
    local key = sum * 4 + prev
    local st = g.states[key]
    while st do
        local other = st.kernel
        if #other == n then
            spent = spent + n
            local same = true
            for k = 1, n do
                if marks[other[k]] ~= gen then
                    same = false
                    break
                end
            end
            if same then
                return st
            end
        end
        st = st.collides
    end
    if g.nstates >= MAX_STATES or g.nkernel + n > MAX_KERNEL or (g.nstates + 1) * g.ncls > MAX_SLOTS then
        flush(g)
    end
    spent = spent + g.ncls
    -- Transitions by class, in the array part.
    st = new_tab(g.ncls, 5)
    st.kernel, st.prev, st.closures = kernel, prev, {}
    st.collides = g.states[key]
    g.states[key] = st
    g.nstates = g.nstates + 1
    g.nkernel = g.nkernel + n
    return st
end

local function start(g)
    if not g.start then
        gen = gen + 1
        if g.anchored then
            marks[g.entry] = gen
            g.start = state(g, { g.entry }, 0, weight[g.entry])
        else
            g.start = state(g, {}, 0, 0)
        end
    end
    return g.start
end

-- The transition of st on class c, computed and cached.
local function step(g, st, c)
    local kind = g.kind[c]
    local chars = closure(g, st, kind)
    local nx = FOUND
    if chars ~= true then
        local x, y, member = g.x, g.y, g.member
        gen = gen + 1
        local nc = #chars
        local kernel, n, sum = new_tab(nc, 0), 0, 0
        for k = 1, nc do
            local pc = chars[k]
            local to = x[pc]
            if member[y[pc]][c] and marks[to] ~= gen then
                marks[to] = gen
                n = n + 1
                kernel[n] = to
                sum = sum + weight[to]
            end
        end
        spent = spent + nc
        nx = state(g, kernel, kind, sum)
    end
    st[c] = nx
    return nx
end

-- Builds a matcher of prog (entry at prog's last instruction).
local function build(prog, entry)
    local g = { op = prog.op, x = prog.x, y = prog.y, entry = entry }
    -- marks too is filled in order, to keep it in the array part
    for pc = #weight + 1, prog.n do
        seed = seed * 48271 % 2147483647 -- MINSTD: sums of pcs do not carry over
        weight[pc] = seed
        marks[pc] = 0
    end
    g.ascii, g.hi_start, g.hi_cls, g.member, g.kind, g.ncls = classes(prog)
    local used = {}
    for pc = 1, prog.n do
        if prog.op[pc] == ASSERT then
            used[prog.y[pc]] = true
        end
    end
    -- What a state must remember of the character before it: only what
    -- some assertion of the NFA looks at, so that others share states.
    local wb = used[A_WB] or used[A_NWB]
    g.pnorm = {
        [0] = (used[A_BOT] or used[A_BOL]) and 0 or OTHER,
        [NL] = used[A_BOL] and NL or OTHER,
        [WORD] = wb and WORD or OTHER,
        [OTHER] = OTHER,
    }
    -- Anchored: nothing can start a match other than at the start of text,
    -- so the entry is in the start state only, and a search ends when
    -- nothing is left. Otherwise the entry's closures are in every state's.
    g.anchored, g.implicit = true, {}
    for ctx = 0, 15 do
        gen = gen + 1
        local chars = {}
        g.implicit[ctx] = walk(g, { entry }, ctx, chars) or chars
        if ctx >= 4 and (g.implicit[ctx] == true or #chars > 0) then
            g.anchored = false
        end
    end
    if g.anchored then
        g.implicit = nil
    end
    flush(g)
    g.runes, g.nrunes = {}, 0
    return g
end

-- The class of non-ASCII rune r, by binary search, remembered for the
-- next time (the search loops stay free of inner loops, which LuaJIT
-- would not compile into them).
local function rune_class(g, r)
    local c = g.hi_cls[interval(g.hi_start, #g.hi_start, r)]
    if g.nrunes >= 4096 then
        g.runes, g.nrunes = {}, 0
    end
    g.runes[r], g.nrunes = c, g.nrunes + 1
    return c
end

local function at_end(g, st)
    return closure(g, st, 0) == true
end

-- Whether g matches anywhere in s, or nil if that takes more than steps
-- transitions not in the cache or costs more than work to compute them
-- (spent); and what is left of work.
local function search(g, s, steps, work)
    local ascii = g.ascii
    local st = start(g)
    local n = #s
    local runes = g.runes
    local i = 1
    -- The inner loop only follows cached transitions: were LuaJIT to
    -- record its trace through a miss (step) or a return, that trace would
    -- not loop and every character would leave it; a break only aborts the
    -- recording. Found and dead states end it through its test likewise.
    while true do
        local c
        while i <= n do
            local b = byte(s, i)
            if b < 0x80 then
                c = ascii[b]
                i = i + 1
            else
                local r, w = decode(s, i, b)
                i = i + w
                c = runes[r]
                if not c then
                    c = rune_class(g, r)
                    runes = g.runes
                end
            end
            local nx = st[c]
            if not nx then
                break
            end
            st = nx
            if nx == FOUND or nx == DEAD then
                i = n + 2
            end
            c = nil
        end
        if c then
            steps = steps - 1
            if steps < 0 or work < 0 then
                return nil
            end
            local before = spent
            st = step(g, st, c)
            work = work - (spent - before)
            if st == FOUND or st == DEAD then
                i = n + 2
            end
        elseif i > n + 1 then
            return st == FOUND, work
        else
            local before = spent
            local hit = at_end(g, st)
            return hit, work - (spent - before)
        end
    end
end

-- Compiles a list of patterns. Returns the matcher of those it took, and a
-- table of why it did not take the others (by index in patterns).
function _M.compile(patterns)
    local refused, sized = {}, {}
    for i, p in ipairs(patterns) do
        local ok, res = pcall(function()
            local node = parse(p)
            local prog = new_prog()
            prog.cap = MAX_INSTS + 1
            emit_node(prog, node, 1)
            return { node = node, size = prog.n - 1 }
        end)
        if ok then
            sized[#sized + 1] = res
        else
            refused[i] = res
        end
    end
    local groups, prog, entries = {}, nil, nil
    local function close()
        if prog then
            local e = entries[#entries]
            for k = #entries - 1, 1, -1 do
                e = emit(prog, SPLIT, entries[k], e)
            end
            groups[#groups + 1] = build(prog, e)
        end
    end
    for _, s in ipairs(sized) do
        if not prog or prog.n + s.size > GROUP_INSTS then
            close()
            prog, entries = new_prog(), {}
            prog.cap = GROUP_INSTS + #sized + 1
        end
        entries[#entries + 1] = emit_node(prog, s.node, 1)
    end
    close()
    return { groups = groups }, refused
end

-- Whether any pattern of m matches s. With steps and work, nil when one of
-- m's automata needs more than steps transitions not in its cache, or all
-- of them cost more than work to compute theirs: how many
-- automata the patterns fill must not multiply what a request can cost.
function _M.match(m, s, steps, work)
    steps, work = steps or huge, work or huge
    for _, g in ipairs(m.groups) do
        local hit
        hit, work = search(g, s, steps, work)
        if hit ~= false then
            return hit
        end
    end
    return false
end

return _M
