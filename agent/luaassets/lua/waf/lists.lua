-- Word lists for the security_check detectors: every occurrence of any of
-- a list's words in one pass (waf/aho.lua's automaton, case folded, as a
-- dense FFI table). A plain string.find per word costs a call per byte
-- that starts the word (a run of "." against ".htaccess" is 20 ns a
-- byte): a list of them is what an attacker would flood.

local aho = require("waf.aho")
local ffi = require("ffi")

local cast = ffi.cast
local ipairs = ipairs
local tonumber = tonumber

local u8p = ffi.typeof("const uint8_t *")
local i32p = ffi.typeof("const int32_t *")

local _M = {}

-- A byte class as an array over 0-255 (array lookups are what the JIT
-- makes fastest); the detectors' byte tests.
function _M.byteset(list)
    local t = {}
    for b = 0, 255 do
        t[b] = false
    end
    for _, b in ipairs(list or {}) do
        t[b] = true
    end
    return t
end

-- A matcher for words (lower-case): each row of its table is the state's
-- transitions as row offsets, then its output's number (0: none).
function _M.new(words)
    local a = aho.build(words, true)
    local ncls, delta, order, nstates = a.ncls, a.delta, a.order, a.nstates
    local width = ncls + 1
    local cls = ffi.new("uint8_t[256]")
    for b = 0, 255 do
        cls[b] = a.cls[b]
    end
    -- accepting states last: "accepting?" is one pointer comparison
    local num, n, first_accept = {}, 0, nil
    for pass = 1, 2 do
        for _, st in ipairs(order) do
            if (a.out[st] ~= nil) == (pass == 2) then
                num[st] = n
                n = n + 1
            end
        end
        if pass == 1 then
            first_accept = n * width
        end
    end
    local tbl = ffi.new("int32_t[?]", nstates * width)
    local outs = {}
    for _, st in ipairs(order) do
        local row = num[st] * width
        for c = 0, ncls - 1 do
            tbl[row + c] = num[delta[st * ncls + c]] * width
        end
        local o = a.out[st]
        if o then
            outs[#outs + 1] = o
            tbl[row + ncls] = #outs
        else
            tbl[row + ncls] = 0
        end
    end
    local lens = {}
    for i, w in ipairs(words) do
        lens[i] = #w
    end
    local base = cast(i32p, tbl)
    return { cls = cls, tbl = tbl, base = base, accept = base + first_accept, ncls = ncls, outs = outs, lens = lens,
        words = words }
end

-- The first word of m in s (by where it ends): its index and the index of
-- its first byte in s, or nil.
function _M.first(m, s)
    local cls, base, accept, ncls = m.cls, m.base, m.accept, m.ncls
    local p = cast(u8p, s)
    local row = base
    for i = 0, #s - 1 do
        row = base + row[cls[p[i]]]
        if row >= accept then
            local w = m.outs[row[ncls]][1]
            return w, i + 2 - m.lens[w]
        end
    end
    return nil
end

-- Every occurrence of m's words in s, at most max: fills WORD[k] (the
-- word's index) and AT[k] (its first byte's index) and returns the count.
-- The arrays are reused by the next call (nothing yields in between).
local WORD, AT = {}, {}
_M.WORD, _M.AT = WORD, AT

function _M.each(m, s, max)
    local cls, base, accept, ncls, outs, lens = m.cls, m.base, m.accept, m.ncls, m.outs, m.lens
    local p = cast(u8p, s)
    local row = base
    local k = 0
    for i = 0, #s - 1 do
        row = base + row[cls[p[i]]]
        if row >= accept then
            for _, w in ipairs(outs[tonumber(row[ncls])]) do
                k = k + 1
                WORD[k], AT[k] = w, i + 2 - lens[w]
                if k >= max then
                    return k
                end
            end
        end
    end
    return k
end

return _M
