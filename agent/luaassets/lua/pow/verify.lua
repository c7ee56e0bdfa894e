-- pass-challenge endpoint. This agent issues no challenges yet, so none can
-- be found and every verification is answered as expired or unknown.

ngx.status = ngx.HTTP_GONE
ngx.header["Content-Type"] = "application/json"
ngx.print('{"error":"challenge expired or not found"}\n')
