-- Intentionally a no-op: the rendered config calls this file, and nothing
-- needs to run here yet.
return
