package render

// The texts below were written from the captured server output (the render
// fixtures). They must stay byte for byte what the OpenFlare Server renders,
// or the PROTOCOL 4.3 checksum breaks.

// builtinOriginErrorHTML is the origin error page used when no custom HTML
// is set. A []byte, which the linker puts in the data segment: the
// read-only one is what the arm64 build keeps under a 64 KiB step of its
// file size (cross/README.md).
var builtinOriginErrorHTML = []byte(`<!DOCTYPE html>
<html lang="zh-CN">
<head>
  <meta charset="UTF-8">
  <meta name="viewport" content="width=device-width, initial-scale=1.0">
  <title>{{status}} | OpenFlare</title>
  <style>
    * { box-sizing: border-box; margin: 0; padding: 0; }
    body {
      font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
      background-color: #ffffff;
      color: #333333;
      height: 100vh;
      display: flex;
      flex-direction: column;
      justify-content: center;
      align-items: center;
      text-align: center;
      padding: 48px 24px;
      -webkit-font-smoothing: antialiased;
    }
    .container {
      max-width: 600px;
      width: 100%;
      display: flex;
      flex-direction: column;
      align-items: center;
      gap: 24px;
    }
    .error-code {
      font-size: 48px;
      font-weight: 700;
      color: #333333;
      line-height: 1.2;
      letter-spacing: -0.02em;
    }
    .error-description {
      font-size: 20px;
      line-height: 1.6;
      color: #666666;
      max-width: 480px;
    }
    .host {
      font-size: 14px;
      color: #999999;
      font-family: ui-monospace, SFMono-Regular, Menlo, Monaco, Consolas, monospace;
      word-break: break-all;
    }
    .footer {
      margin-top: 48px;
      display: flex;
      align-items: center;
      justify-content: center;
      gap: 8px;
      color: #999999;
      font-size: 14px;
      font-weight: 500;
    }
    .brand-icon { width: 24px; height: 24px; fill: currentColor; display: block; }
    @media (max-width: 480px) {
      .error-code { font-size: 36px; }
      .error-description { font-size: 18px; }
    }
  </style>
</head>
<body>
<div class="container">
  <h1 class="error-code" aria-label="HTTP status">{{status}}</h1>
  <p class="error-description">
    The upstream server is unreachable. Please try again later or contact the site administrator if the problem persists.
  </p>
  <p class="host">{{host}}</p>
  <div class="footer">
    <svg class="brand-icon" viewBox="0 0 24 24" xmlns="http://www.w3.org/2000/svg" aria-hidden="true">
      <path d="M13 2L3 14H12L11 22L21 10H12L13 2Z" />
    </svg>
    <span>OpenFlare</span>
  </div>
</div>
</body>
</html>
`)

// builtinOfflineHTML is the service-worker offline page used when no custom HTML is set.
const builtinOfflineHTML = `<!DOCTYPE html>
<html lang="zh-CN">
<head>
<meta charset="UTF-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>网站暂时无法访问 | 联系站长</title>
<style>
  * { box-sizing: border-box; margin: 0; padding: 0; }
  body { font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; background: #ffffff; color: #333333; height: 100vh; display: flex; flex-direction: column; justify-content: center; align-items: center; text-align: center; padding: 48px 24px; }
  h1 { font-size: 28px; font-weight: 700; margin-bottom: 16px; }
  p { font-size: 16px; line-height: 1.7; color: #666666; max-width: 520px; }
</style>
</head>
<body>
<h1>网站暂时无法访问</h1>
<p>当前域名暂时无法从网络访问。请通过其他方式联系网站管理员获取最新访问入口。</p>
</body>
</html>
`

// swJSHead and swJSTail surround the cache-name suffix in the generated sw.js.
const swJSHead = `var CACHE = "openflare-offline-`

const swJSTail = `";
var OFFLINE = "/offline.html";
self.addEventListener("install", function (e) {
  e.waitUntil(caches.open(CACHE).then(function (c) { return c.addAll([OFFLINE]); }));
  self.skipWaiting();
});
self.addEventListener("activate", function (e) {
  e.waitUntil(caches.keys().then(function (keys) {
    return Promise.all(keys.filter(function (k) { return k.indexOf("openflare-offline-") === 0 && k !== CACHE; }).map(function (k) { return caches.delete(k); }));
  }));
  self.clients.claim();
});
self.addEventListener("fetch", function (e) {
  if (e.request.method !== "GET" || e.request.mode !== "navigate") { return; }
  e.respondWith(
    fetch(e.request).catch(function () {
      return caches.match(e.request).then(function (r) { return r || caches.match(OFFLINE); });
    })
  );
});
`

// originErrorNamedLocation answers intercepted errors with the template (all-methods mode).
const originErrorNamedLocation = `    location @__openflare_origin_error {
        default_type text/html;
        charset utf-8;
        content_by_lua_block {
            local function resolve_error_status()
                local code = tonumber(ngx.var.status)
                if code and code >= 400 then
                    return code
                end
                local upstream = ngx.var.upstream_status or ""
                -- multi-upstream: "502, 502" or failed connect "0"
                local first = upstream:match("(%d+)")
                code = tonumber(first)
                if code and code >= 400 then
                    return code
                end
                code = tonumber(ngx.status)
                if code and code >= 400 then
                    return code
                end
                return 502
            end

            local code = resolve_error_status()
            ngx.status = code

            local f = io.open("__OPENFLARE_ERROR_PAGE_TMPL__", "r")
            if not f then
                ngx.header["Content-Type"] = "text/html; charset=utf-8"
                ngx.say("Error ", tostring(code))
                return
            end
            local body = f:read("*a")
            f:close()
            local status = tostring(code)
            local host = ngx.var.host or ""
            -- function replacer: plain insert, no percent pattern side effects
            body = body:gsub("{{status}}", function() return status end)
            body = body:gsub("{{host}}", function() return host end)
            ngx.header["Content-Type"] = "text/html; charset=utf-8"
            ngx.say(body)
        }
    }
`

// originErrorFiltersHead and originErrorFiltersTail surround the status list of the GET-only filters.
const originErrorFiltersHead = `        header_filter_by_lua_block {
            local codes = {`

const originErrorFiltersTail = `}
            local function match(code)
                for _, c in ipairs(codes) do
                    if c == code then
                        return true
                    end
                end
                return false
            end
            local status = ngx.status
            if match(status) and ngx.req.get_method() == "GET" then
                ngx.header.content_length = nil
                ngx.header["Content-Type"] = "text/html; charset=utf-8"
                local f = io.open("__OPENFLARE_ERROR_PAGE_TMPL__", "r")
                local body = f and f:read("*a")
                if f then
                    f:close()
                end
                if not body then
                    body = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" .. tostring(status) .. "</title></head><body><h1>" .. tostring(status) .. "</h1></body></html>"
                end
                body = body:gsub("{{status}}", function() return tostring(status) end)
                body = body:gsub("{{host}}", function() return ngx.var.host or "" end)
                ngx.ctx.openflare_error_html = body
            end
        }
        body_filter_by_lua_block {
            local html = ngx.ctx.openflare_error_html
            if html then
                ngx.arg[1] = html
                ngx.arg[2] = true
                ngx.ctx.openflare_error_html = nil
            end
        }
`

// stockMainTemplate is the built-in main template, used when the snapshot
// carries a blank one; it equals what a fresh server sends.
const stockMainTemplate = `# This file is generated by OpenFlare. Do not edit manually.
user openflare;
worker_processes {{OpenRestyWorkerProcesses}};
worker_rlimit_nofile {{OpenRestyWorkerRlimitNofile}};
pid __OPENFLARE_PID_PATH__;
error_log {{OpenRestyErrorLogPath}} warn;

events {
    worker_connections {{OpenRestyWorkerConnections}};
{{OpenRestyEventsUseDirective}}{{OpenRestyEventsMultiAcceptDirective}}}

http {
    include       mime.types;
    default_type  application/octet-stream;
    server_tokens off;
    client_body_temp_path __OPENFLARE_NGINX_CACHE_DIR__/client_temp;
    proxy_temp_path __OPENFLARE_NGINX_CACHE_DIR__/proxy_temp;
    fastcgi_temp_path __OPENFLARE_NGINX_CACHE_DIR__/fastcgi_temp;
    uwsgi_temp_path __OPENFLARE_NGINX_CACHE_DIR__/uwsgi_temp;
    scgi_temp_path __OPENFLARE_NGINX_CACHE_DIR__/scgi_temp;
{{OpenRestyConnectionUpgradeMap}}{{OpenRestyDefaultServerBlock}}    log_format openflare_json escape=json '{"ts":"$time_iso8601","host":"$host","path":"$request_uri","remote_addr":"$remote_addr","status":$status,"request_time":$request_time,"bytes_sent":$body_bytes_sent,"request_length":$request_length,"user_agent":"$http_user_agent","cache_status":"$upstream_cache_status"}';
    access_log {{OpenRestyAccessLogPath}} openflare_json;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout {{OpenRestyKeepaliveTimeout}};
    keepalive_requests {{OpenRestyKeepaliveRequests}};
    client_header_timeout {{OpenRestyClientHeaderTimeout}};
    client_body_timeout {{OpenRestyClientBodyTimeout}};
    client_max_body_size {{OpenRestyClientMaxBodySize}};
    large_client_header_buffers {{OpenRestyLargeClientHeaderBuffers}};
    send_timeout {{OpenRestySendTimeout}};
    proxy_connect_timeout {{OpenRestyProxyConnectTimeout}};
    proxy_send_timeout {{OpenRestyProxySendTimeout}};
    proxy_read_timeout {{OpenRestyProxyReadTimeout}};
    proxy_request_buffering {{OpenRestyProxyRequestBuffering}};
    proxy_buffering {{OpenRestyProxyBuffering}};
    proxy_buffers {{OpenRestyProxyBuffers}};
    proxy_buffer_size {{OpenRestyProxyBufferSize}};
    proxy_busy_buffers_size {{OpenRestyProxyBusyBuffersSize}};
    gzip {{OpenRestyGzip}};
    gzip_min_length {{OpenRestyGzipMinLength}};
    gzip_comp_level {{OpenRestyGzipCompLevel}};
{{OpenRestyResolverDirective}}{{OpenRestyCacheBlock}}    include {{OpenRestyRouteConfigInclude}};
}
`
