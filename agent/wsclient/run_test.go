package wsclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"openflare/agent/protocol"
	"openflare/internal/jsonstream"
)

func TestHandshakeCarriesTokenAndUserAgent(t *testing.T) {
	srv := newServer(t, false)
	r := start(t, options(t, srv.URL+"/of/?ignored=1"), newHandler())
	p := srv.accept(t)
	if got := p.req.Header.Get(protocol.TokenHeader); got != testToken {
		t.Errorf("token header = %q", got)
	}
	if got := p.req.Header.Get("User-Agent"); got != "openflare/1.2.3" {
		t.Errorf("User-Agent = %q", got)
	}
	if got := p.req.URL.Path; got != "/of"+protocol.PathWebSocket {
		t.Errorf("path = %q", got)
	}
	if p.req.URL.RawQuery != "" {
		t.Errorf("query leaked into the handshake: %q", p.req.URL.RawQuery)
	}
	await(t, r.up, "up callback")
}

func TestStatusSentAtOnce(t *testing.T) {
	srv := newServer(t, false)
	r := start(t, options(t, srv.URL), newHandler()) // interval: one hour
	p := srv.accept(t)
	m, _ := p.recv()
	if m.Type != protocol.WSStatus || !strings.Contains(string(m.Payload), `"version":"v-test"`) {
		t.Fatalf("first frame = %s %s, want the status", m.Type, m.Payload)
	}
	select {
	case <-r.up:
	default:
		t.Error("up was not called before the first status")
	}
}

func TestStatusPeriodic(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	var asked atomic.Int32
	o.Interval = func() time.Duration { asked.Add(1); return 10 * time.Millisecond }
	start(t, o, newHandler())
	p := srv.accept(t)
	for range 4 {
		if m, _ := p.recv(); m.Type != protocol.WSStatus {
			t.Fatalf("got %q, want status", m.Type)
		}
	}
	if asked.Load() < 3 {
		t.Errorf("Interval asked %d times, want once per tick", asked.Load())
	}
}

// StatusNow sends a status before the (here one hour) interval is up.
func TestStatusNow(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	now := make(chan struct{}, 1)
	o.StatusNow = now
	start(t, o, newHandler())
	p := srv.accept(t)
	p.recvType(protocol.WSStatus)
	now <- struct{}{}
	if m, _ := p.recv(); m.Type != protocol.WSStatus {
		t.Fatalf("got %q, want a status on StatusNow", m.Type)
	}
}

func TestCommitAfterWrite(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.Interval = func() time.Duration { return 10 * time.Millisecond }
	h := newHandler()
	var calls atomic.Int32
	committed := make(chan string, 16)
	h.status = func(context.Context) (*protocol.NodePayload, func()) {
		n := calls.Add(1)
		if n == 1 {
			// Skipped tick: nothing is sent, so nothing may be committed.
			return nil, func() { committed <- "skipped" }
		}
		name := "beat-" + string(rune('0'+n))
		return &protocol.NodePayload{Version: "v-test", Name: name}, func() { committed <- name }
	}
	start(t, o, h)
	p := srv.accept(t)
	m, _ := p.recv()
	if !strings.Contains(string(m.Payload), `"name":"beat-2"`) {
		t.Fatalf("first status sent = %s, want beat-2 (tick 1 was skipped)", m.Payload)
	}
	if got := await(t, committed, "commit"); got != "beat-2" {
		t.Fatalf("commit = %q, want beat-2", got)
	}
}

func TestCommitNotCalledWhenWriteFails(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.WriteTimeout = 200 * time.Millisecond
	o.Interval = func() time.Duration { return time.Millisecond }
	h := newHandler()
	var built, committed atomic.Int32
	// The server never reads: statuses pile up in the socket buffers until
	// one write times out. Every status before it was written, that one not.
	chunk := strings.Repeat("x", 256<<10)
	h.status = func(context.Context) (*protocol.NodePayload, func()) {
		built.Add(1)
		return &protocol.NodePayload{Version: "v-test", LastError: chunk}, func() { committed.Add(1) }
	}
	r := start(t, o, h)
	srv.accept(t)
	err := r.wait(t, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "send status") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("Run = %v, want a send status timeout", err)
	}
	if b, c := built.Load(), committed.Load(); c != b-1 || c == 0 {
		t.Errorf("%d statuses built, %d committed; want every one but the failed last", b, c)
	}
}

func TestUnencodableStatusSkipped(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.Interval = func() time.Duration { return 10 * time.Millisecond }
	h := newHandler()
	var calls atomic.Int32
	committed := make(chan int32, 16)
	h.status = func(context.Context) (*protocol.NodePayload, func()) {
		n := calls.Add(1)
		p := &protocol.NodePayload{Version: "v-test"}
		if n == 1 {
			p.HostMetrics = &protocol.HostMetrics{CPUUsagePercent: math.NaN()}
		}
		return p, func() { committed <- n }
	}
	r := start(t, o, h)
	p := srv.accept(t)
	p.recvType(protocol.WSStatus)
	if n := await(t, committed, "commit"); n == 1 {
		t.Error("commit called for a status that could not be encoded")
	}
	r.stillRunning(t)
}

func TestPingPong(t *testing.T) {
	srv := newServer(t, false)
	start(t, options(t, srv.URL), newHandler())
	p := srv.accept(t)
	p.recvType(protocol.WSStatus)
	p.sendRaw(`{"type":"ping"}`)
	if _, raw := p.recvType(protocol.WSPong); raw != `{"type":"pong"}` {
		t.Errorf("pong frame = %s", raw)
	}
}

func TestDispatch(t *testing.T) {
	srv := newServer(t, false)
	h := newHandler()
	start(t, options(t, srv.URL), h)
	p := srv.accept(t)

	settings := protocol.AgentSettings{HeartbeatInterval: 5000, WebsocketUpgradeEnabled: true,
		UpdateRepo: "Rain-kl/OpenFlare", UpdateNow: true, UpdateChannel: "preview", RestartOpenRestyNow: true}
	active := protocol.ConfigRef{Version: "20260718-005", Checksum: strings.Repeat("a", 64)}
	force := protocol.ConfigRef{Version: "20260718-006", Checksum: strings.Repeat("b", 64)}
	groups := []protocol.WAFIPGroup{
		{ID: 3, Name: "blocklist", Type: "manual", Enabled: true, IPList: []string{"198.51.100.7", "203.0.113.0/24"}, Checksum: "c1"},
		{ID: 9, Name: "empty", Type: "subscription", IPList: []string{}, Checksum: "c2"},
	}
	p.send(protocol.WSSettings, settings)
	p.send(protocol.WSActiveConfig, active)
	p.send(protocol.WSForceSyncConfig, force)
	p.send(protocol.WSWAFIPGroups, groups) // a bare array, as the server sends it

	if got := await(t, h.settings, "settings"); got != settings {
		t.Errorf("settings = %+v", got)
	}
	if got := await(t, h.active, "active_config"); got != active {
		t.Errorf("active_config = %+v", got)
	}
	if got := await(t, h.force, "force_sync_config"); got != force {
		t.Errorf("force_sync_config = %+v", got)
	}
	if got := await(t, h.groups, "waf_ip_groups"); !reflect.DeepEqual(got, groups) {
		t.Errorf("waf_ip_groups = %+v", got)
	}
}

func TestIgnoredFramesCounted(t *testing.T) {
	srv := newServer(t, false)
	h := newHandler()
	o := options(t, srv.URL)
	r := start(t, o, h)
	p := srv.accept(t)

	p.sendRaw(`{"type":"brand_new_feature","payload":{"x":1}}`)          // unknown
	p.sendRaw(`this is not json`)                                        // undecodable
	p.sendRaw(`{"type":"active_config","payload":"oops"}`)               // undecodable
	p.sendRaw(`{"type":"settings","payload":null}`)                      // undecodable, not "disabled"
	p.sendRaw(`{"type":"settings"}`)                                     // undecodable
	p.sendRaw(`{"type":"waf_ip_groups","payload":{"id":1}}`)             // undecodable: not an array
	p.sendRaw(`{"type":"force_sync_config","payload":{"version":true}}`) // undecodable: wrong field type
	if err := websocket.Message.Send(p.ws, []byte{0xff, 0x00}); err != nil {
		t.Fatal(err) // binary garbage: undecodable
	}
	// Frames are handled in order, so the pong proves all of the above were.
	p.sendRaw(`{"type":"ping"}`)
	p.recvType(protocol.WSPong)

	if got := o.Stats.Unknown.Load(); got != 1 {
		t.Errorf("unknown = %d, want 1", got)
	}
	if got := o.Stats.Undecodable.Load(); got != 7 {
		t.Errorf("undecodable = %d, want 7", got)
	}
	if len(h.settings)+len(h.active)+len(h.force)+len(h.groups) != 0 {
		t.Error("a bad frame reached the handler")
	}
	r.stillRunning(t)
}

func TestSettingsDisabled(t *testing.T) {
	srv := newServer(t, false)
	h := newHandler()
	r := start(t, options(t, srv.URL), h)
	p := srv.accept(t)
	p.send(protocol.WSSettings, protocol.AgentSettings{HeartbeatInterval: 3000, UpdateNow: true})

	if got := await(t, h.settings, "settings"); !got.UpdateNow {
		t.Errorf("settings not delivered before closing: %+v", got)
	}
	if err := r.wait(t, waitLimit); !errors.Is(err, ErrDisabled) {
		t.Fatalf("Run = %v, want ErrDisabled", err)
	}
	// The client closed the socket: the server's read ends.
	_ = p.ws.SetReadDeadline(time.Now().Add(waitLimit))
	var rest string
	for {
		err := websocket.Message.Receive(p.ws, &rest)
		if err == nil {
			continue // statuses still in flight
		}
		if isTimeout(err) {
			t.Fatal("client did not close the socket")
		}
		break
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestReadDeadlineHalfOpen(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.ReadDeadline = 300 * time.Millisecond
	o.Interval = func() time.Duration { return 20 * time.Millisecond } // outbound traffic must not count
	r := start(t, o, newHandler())
	srv.accept(t) // accepted, then silent
	await(t, r.up, "up callback")
	began := time.Now()
	err := r.wait(t, waitLimit)
	if !errors.Is(err, ErrHalfOpen) || !strings.Contains(err.Error(), "half-open") {
		t.Fatalf("Run = %v, want a half-open error", err)
	}
	if el := time.Since(began); el < 250*time.Millisecond {
		t.Errorf("gave up after %s, before the %s deadline", el, o.ReadDeadline)
	}
}

func TestReadDeadlineRearmedByFrames(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.ReadDeadline = 300 * time.Millisecond
	r := start(t, o, newHandler())
	p := srv.accept(t)
	p.recvType(protocol.WSStatus)
	// Three deadlines' worth of time, with a frame every 100 ms.
	for range 9 {
		time.Sleep(100 * time.Millisecond)
		p.sendRaw(`{"type":"pong"}`)
	}
	r.stillRunning(t)
}

func TestServerDropsSocket(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.ReadDeadline = time.Minute
	r := start(t, o, newHandler())
	p := srv.accept(t)
	p.recvType(protocol.WSStatus)
	p.hangUp()
	err := r.wait(t, 2*time.Second)
	if err == nil || errors.Is(err, ErrHalfOpen) {
		t.Fatalf("Run = %v, want a closed-connection error", err)
	}
}

func TestTokenRejected(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.Token = "wrong-" + testToken // contains testToken, so the log check covers it too
	r := start(t, o, newHandler())
	err := r.wait(t, waitLimit)
	if !errors.Is(err, ErrTokenRejected) || !strings.Contains(err.Error(), "rejected the agent token") {
		t.Fatalf("Run = %v, want the token-rejected error", err)
	}
	if strings.Contains(err.Error(), o.Token) {
		t.Errorf("error contains the token: %v", err)
	}
	select {
	case <-r.up:
		t.Error("up called although the handshake failed")
	default:
	}
}

func TestHandshakeOtherStatus(t *testing.T) {
	srv := newServer(t, false)
	r := start(t, options(t, srv.URL+"/nowhere"), newHandler())
	err := r.wait(t, waitLimit)
	if err == nil || errors.Is(err, ErrTokenRejected) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Run = %v, want an error naming HTTP 404", err)
	}
}

// A frame over MaxFrame that is not an IP-group push is skipped, however
// large: the session goes on with the frames after it.
func TestOversizedFrameSkipped(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.MaxFrame = 1024
	h := newHandler()
	r := start(t, o, h)
	p := srv.accept(t)
	p.send(protocol.WSActiveConfig, protocol.ConfigRef{Version: strings.Repeat("v", 2048)})
	p.sendRaw(`{"type":"ping","padding":"` + strings.Repeat("x", 4<<20) + `"}`)
	p.send(protocol.WSActiveConfig, protocol.ConfigRef{Version: "v2"})
	if got := await(t, h.active, "active_config"); got.Version != "v2" {
		t.Fatalf("active_config %q, want the one after the large frames", got.Version)
	}
	if got := o.Stats.Undecodable.Load(); got != 2 {
		t.Errorf("undecodable = %d, want 2", got)
	}
	r.stillRunning(t)
}

// streamHandler reads a push the way agent/ipgroups does, entry by entry,
// and reports the entries it saw.
type streamHandler struct {
	*handler
	entries chan int
}

func (h *streamHandler) IPGroups(dec *json.Decoder) error {
	n := 0
	err := jsonstream.Array(dec, func() error {
		return jsonstream.Object(dec, func(key string) error {
			if key != "ip_list" {
				return jsonstream.Skip(dec)
			}
			return jsonstream.Array(dec, func() error {
				var e string
				n++
				return dec.Decode(&e)
			})
		})
	})
	if err == nil {
		h.entries <- n
	}
	return err
}

// bigPush is a waf_ip_groups message of one group of n entries.
func bigPush(n int) string {
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	b, _ := json.Marshal([]protocol.WAFIPGroup{{ID: 1, Enabled: true, IPList: list, Checksum: "c"}})
	return `{"type":"waf_ip_groups","payload":` + string(b) + `}`
}

// An IP-group push over MaxFrame reaches the handler as a stream, read
// exactly to the end of its frame: the messages right behind it are
// handled, and the session goes on. One over MaxMessage ends the session,
// naming the limit; one holding a value over MaxFrame is skipped.
func TestLargeIPGroupPushStreamed(t *testing.T) {
	srv := newServer(t, false)
	o := options(t, srv.URL)
	o.MaxFrame, o.MaxMessage = 1024, 4<<20
	h := &streamHandler{handler: newHandler(), entries: make(chan int, 4)}
	r := start(t, o, h)
	p := srv.accept(t)

	p.sendRaw(bigPush(100_000)) // 1.5 MB
	p.send(protocol.WSActiveConfig, protocol.ConfigRef{Version: "after"})
	if n := await(t, h.entries, "the streamed push"); n != 100_000 {
		t.Fatalf("%d entries, want 100000", n)
	}
	if got := await(t, h.active, "active_config"); got.Version != "after" {
		t.Fatalf("active_config %q", got.Version)
	}
	p.sendRaw(`{"type":"waf_ip_groups","payload":[{"id":1,"ip_list":["` + strings.Repeat("1", 2048) + `"]}]}`)
	p.sendRaw(`{"payload":[` + strings.Repeat(`{"id":1},`, 200) + `{"id":1}],"type":"waf_ip_groups"}`)
	p.sendRaw(`{"type":"ping"}`)
	p.recvType(protocol.WSPong)
	if got := o.Stats.Undecodable.Load(); got != 2 {
		t.Errorf("undecodable = %d, want 2 (an entry over MaxFrame, a payload before its type)", got)
	}
	r.stillRunning(t)

	p.sendRaw(bigPush(400_000)) // 6 MB
	err := r.wait(t, waitLimit)
	if !errors.Is(err, websocket.ErrFrameTooLarge) || !strings.Contains(err.Error(), "4194304-byte limit") {
		t.Fatalf("Run = %v, want an error naming the 4194304-byte limit", err)
	}
}

func TestCancelReturnsNil(t *testing.T) {
	srv := newServer(t, false)
	r := start(t, options(t, srv.URL), newHandler())
	p := srv.accept(t)
	p.recvType(protocol.WSStatus)
	r.cancel()
	if err := r.wait(t, time.Second); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

// silentListener accepts TCP connections, reads the start of the upgrade
// request and never answers. Each connection is reported once its request
// arrived.
func silentListener(t *testing.T) (serverURL string, requested <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan struct{}, 8)
	conns := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			if _, err := c.Read(make([]byte, 1)); err == nil {
				arrived <- struct{}{}
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return "http://" + ln.Addr().String(), arrived
}

func TestHandshakeTimeout(t *testing.T) {
	serverURL, _ := silentListener(t)
	o := options(t, serverURL)
	o.DialTimeout = 200 * time.Millisecond
	r := start(t, o, newHandler())
	err := r.wait(t, waitLimit)
	if err == nil || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Fatalf("Run = %v, want a handshake timeout", err)
	}
}

func TestCancelDuringHandshake(t *testing.T) {
	serverURL, requested := silentListener(t)
	r := start(t, options(t, serverURL), newHandler())
	await(t, requested, "upgrade request")
	r.cancel()
	if err := r.wait(t, time.Second); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

func TestTLS(t *testing.T) {
	srv := newServer(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	o := options(t, srv.URL)
	o.TLSConfig = &tls.Config{RootCAs: roots}
	start(t, o, newHandler())
	p := srv.accept(t)
	if m, _ := p.recv(); m.Type != protocol.WSStatus {
		t.Fatalf("got %q over wss, want status", m.Type)
	}
}

func TestTLSVerificationAlwaysOn(t *testing.T) {
	srv := newServer(t, true)
	o := options(t, srv.URL)
	o.TLSConfig = &tls.Config{InsecureSkipVerify: true} // ignored on purpose
	r := start(t, o, newHandler())
	err := r.wait(t, waitLimit)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Run = %v, want a certificate error", err)
	}
}
