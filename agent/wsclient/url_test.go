package wsclient

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"http://cp.example.com", "ws://cp.example.com/api/v1/agent/ws"},
		{"https://cp.example.com", "wss://cp.example.com/api/v1/agent/ws"},
		{"https://cp.example.com/of", "wss://cp.example.com/of/api/v1/agent/ws"},
		{"https://cp.example.com/of/", "wss://cp.example.com/of/api/v1/agent/ws"},
		{"http://cp.example.com/", "ws://cp.example.com/api/v1/agent/ws"},
		{"http://127.0.0.1:8080/of?a=1&b=2#frag", "ws://127.0.0.1:8080/of/api/v1/agent/ws"},
		{"http://[::1]:3000", "ws://[::1]:3000/api/v1/agent/ws"},
		{"ws://cp.example.com:81/x", "ws://cp.example.com:81/x/api/v1/agent/ws"},
		{"wss://cp.example.com", "wss://cp.example.com/api/v1/agent/ws"},
		{"HTTPS://cp.example.com", "wss://cp.example.com/api/v1/agent/ws"},
		{"https://user:pw@cp.example.com/of", "wss://cp.example.com/of/api/v1/agent/ws"},
		{"https://cp.example.com/a%2Fb", "wss://cp.example.com/a%2Fb/api/v1/agent/ws"},
	}
	for _, tc := range tests {
		got, err := URL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("URL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestURLRefused(t *testing.T) {
	for _, in := range []string{"ftp://cp.example.com", "cp.example.com", "", "http://", "http://bad host/"} {
		if got, err := URL(in); err == nil {
			t.Errorf("URL(%q) = %q, want an error", in, got)
		}
	}
	_, err := URL("ftp://cp.example.com")
	if err == nil || !strings.Contains(err.Error(), `"ftp"`) {
		t.Errorf("ftp error should name the scheme: %v", err)
	}
}

func TestOrigin(t *testing.T) {
	_, origin, err := endpoints("wss://cp.example.com/of/?q=1")
	if err != nil || origin != "https://cp.example.com/of" {
		t.Errorf("origin = %q, %v; want https://cp.example.com/of", origin, err)
	}
}
