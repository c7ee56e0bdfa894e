-- PoW access-phase hook. Kept as a no-op for configs that still call it:
-- the proof-of-work decision is taken by pow nodes inside the WAF graph.

local _M = {}

function _M.check()
end

return _M
