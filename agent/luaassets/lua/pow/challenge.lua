-- make-challenge endpoint. No pow node hands a challenge config to this
-- agent yet, so every request gets the "not evaluated" answer that the full
-- flow gives when the hand-off is missing. No Content-Type is set, so the
-- http-level default_type applies.

ngx.status = ngx.HTTP_FORBIDDEN
ngx.print("PoW graph node was not evaluated for this request\n")
