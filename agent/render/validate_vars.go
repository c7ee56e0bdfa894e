package render

import "strings"

// knownVariables are the variables nginx defines in every build the agent
// runs (the http core, upstream, proxy, SSL, gzip and limit modules, which
// the rendered config needs anyway). A value naming any other variable
// fails `nginx -t` with `unknown "…" variable`.
var knownVariables = map[string]bool{
	// ngx_http_variables.c
	"http_host": true, "http_user_agent": true, "http_referer": true, "http_via": true,
	"http_x_forwarded_for": true, "http_cookie": true, "content_length": true, "content_type": true,
	"host": true, "binary_remote_addr": true, "remote_addr": true, "remote_port": true,
	"proxy_protocol_addr": true, "proxy_protocol_port": true, "proxy_protocol_server_addr": true,
	"proxy_protocol_server_port": true, "server_addr": true, "server_port": true, "server_protocol": true,
	"scheme": true, "https": true, "request_uri": true, "uri": true, "document_uri": true, "request": true,
	"document_root": true, "realpath_root": true, "query_string": true, "args": true, "is_args": true,
	"request_filename": true, "server_name": true, "request_method": true, "remote_user": true,
	"bytes_sent": true, "body_bytes_sent": true, "pipe": true, "request_completion": true,
	"request_body": true, "request_body_file": true, "request_length": true, "request_time": true,
	"request_id": true, "status": true, "limit_rate": true, "connection": true,
	"connection_requests": true, "connection_time": true, "nginx_version": true, "hostname": true,
	"pid": true, "msec": true, "time_iso8601": true, "time_local": true,
	"tcpinfo_rtt": true, "tcpinfo_rttvar": true, "tcpinfo_snd_cwnd": true, "tcpinfo_rcv_space": true,
	// ngx_http_upstream.c, ngx_http_proxy_module.c
	"upstream_addr": true, "upstream_status": true, "upstream_connect_time": true,
	"upstream_header_time": true, "upstream_response_time": true, "upstream_response_length": true,
	"upstream_bytes_received": true, "upstream_bytes_sent": true, "upstream_cache_status": true,
	"proxy_host": true, "proxy_port": true, "proxy_add_x_forwarded_for": true,
	// ngx_http_ssl_module.c
	"ssl_protocol": true, "ssl_cipher": true, "ssl_ciphers": true, "ssl_curves": true,
	"ssl_session_id": true, "ssl_session_reused": true, "ssl_early_data": true, "ssl_server_name": true,
	"ssl_alpn_protocol": true, "ssl_client_cert": true, "ssl_client_raw_cert": true,
	"ssl_client_escaped_cert": true, "ssl_client_s_dn": true, "ssl_client_i_dn": true,
	"ssl_client_serial": true, "ssl_client_fingerprint": true, "ssl_client_verify": true,
	"ssl_client_v_start": true, "ssl_client_v_end": true, "ssl_client_v_remain": true,
	// gzip, limit_req, limit_conn
	"gzip_ratio": true, "limit_req_status": true, "limit_conn_status": true,
}

// knownVariablePrefixes are nginx's prefix variables ($http_<header> …).
var knownVariablePrefixes = []string{
	"http_", "sent_http_", "sent_trailer_", "cookie_", "arg_",
	"upstream_http_", "upstream_trailer_", "upstream_cookie_",
}

// knownVariable looks a name up the way nginx does: case-insensitively.
func knownVariable(name string) bool {
	name = strings.ToLower(name)
	if knownVariables[name] {
		return true
	}
	for _, p := range knownVariablePrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
