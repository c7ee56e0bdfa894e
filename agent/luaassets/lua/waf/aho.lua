-- Aho-Corasick automata over byte strings, for the WAF checks that look
-- for many tokens at once (waf/ua.lua, waf/security.lua): a scan costs one
-- table step per input byte, whatever the number of tokens.

local byte = string.byte
local ipairs = ipairs

local _M = {}

local EMPTY = {}

-- build returns the automaton of a list of tokens:
--   cls[b]      the class of byte b (0 to 255): one per byte some token
--               uses, 0 for every other byte. With fold, an upper-case
--               ASCII letter takes its lower-case letter's class (the
--               tokens are lower-case), which scans a string as if it were
--               lower-cased, without the copy.
--   ncls        the number of classes
--   delta       the complete transition table, flat:
--               delta[state * ncls + class]; state 0 is the root
--   order       every state, breadth first (the root first)
--   out[state]  the indices of the tokens that end at the state or at one
--               of its suffixes, its own first (absent when none)
--   nstates     the number of states
function _M.build(tokens, fold)
    local cls, ncls = {}, 1
    for b = 0, 255 do
        cls[b] = 0
    end
    for _, tok in ipairs(tokens) do
        for k = 1, #tok do
            local b = byte(tok, k)
            if cls[b] == 0 then
                cls[b] = ncls
                ncls = ncls + 1
            end
        end
    end
    if fold then
        for b = 65, 90 do
            cls[b] = cls[b + 32]
        end
    end

    local trie, out, nstates = { [0] = {} }, {}, 1
    for i, tok in ipairs(tokens) do
        local st = 0
        for k = 1, #tok do
            local c = cls[byte(tok, k)]
            local nx = trie[st][c]
            if not nx then
                nx = nstates
                nstates = nstates + 1
                trie[nx] = {}
                trie[st][c] = nx
            end
            st = nx
        end
        local o = out[st] or {}
        o[#o + 1] = i
        out[st] = o
    end

    -- Breadth first: failure links and the transitions of missing edges;
    -- a state inherits the outputs of its failure state (a shorter
    -- suffix), which comes earlier in this order.
    local delta, fail, order = {}, { [0] = 0 }, {}
    local queue, head = { 0 }, 1
    while queue[head] do
        local st = queue[head]
        head = head + 1
        order[#order + 1] = st
        local inherited = st ~= 0 and out[fail[st]]
        if inherited then
            local merged = {}
            for _, i in ipairs(out[st] or EMPTY) do
                merged[#merged + 1] = i
            end
            for _, i in ipairs(inherited) do
                merged[#merged + 1] = i
            end
            out[st] = merged
        end
        local row = st * ncls
        for c = 0, ncls - 1 do
            local nx = trie[st][c]
            if nx then
                fail[nx] = st == 0 and 0 or delta[fail[st] * ncls + c]
                delta[row + c] = nx
                queue[#queue + 1] = nx
            else
                delta[row + c] = st == 0 and 0 or delta[fail[st] * ncls + c]
            end
        end
    end
    return { cls = cls, ncls = ncls, delta = delta, order = order, out = out, nstates = nstates }
end

return _M
