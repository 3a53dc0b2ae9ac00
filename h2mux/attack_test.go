package h2mux_test

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ballast/h2mux"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// attacker is a raw HTTP/2 client on a socket: it writes whatever frames it likes and reads
// the server's frames on a goroutine of its own.
type attacker struct {
	nc    net.Conn
	fr    *http2.Framer
	w     bytes.Buffer
	enc   *hpack.Encoder
	eb    bytes.Buffer
	mu    sync.Mutex
	seen  []string
	ended chan struct{}
}

func dialAttacker(t *testing.T, p plane) *attacker {
	t.Helper()
	addr := strings.TrimSuffix(p.url[strings.Index(p.url, "//")+2:], "/")
	var nc net.Conn
	var err error
	if p.name == "tls" {
		nc, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	} else {
		nc, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	a := &attacker{nc: nc, ended: make(chan struct{})}
	a.fr = http2.NewFramer(&a.w, nil)
	a.fr.AllowIllegalWrites = true
	a.enc = hpack.NewEncoder(&a.eb)
	a.w.WriteString(http2.ClientPreface)
	a.fr.WriteSettings()
	a.fr.WriteSettingsAck()
	a.send()
	go a.read()
	return a
}

func (a *attacker) read() {
	defer close(a.ended)
	rd := http2.NewFramer(nil, a.nc)
	rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			return
		}
		var s string
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			s = "GOAWAY " + f.ErrCode.String()
		case *http2.RSTStreamFrame:
			s = fmt.Sprintf("RST %d %v", f.StreamID, f.ErrCode)
		case *http2.MetaHeadersFrame:
			s = fmt.Sprintf("HEADERS %d %s", f.StreamID, f.PseudoValue("status"))
		default:
			continue
		}
		a.mu.Lock()
		a.seen = append(a.seen, s)
		a.mu.Unlock()
	}
}

// send writes the frames buffered so far (errors are the server closing on us: expected).
func (a *attacker) send() {
	a.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	a.nc.Write(a.w.Bytes())
	a.w.Reset()
}

func (a *attacker) block(kv ...string) []byte {
	a.eb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		a.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), a.eb.Bytes()...)
}

func (a *attacker) get(id uint32, end bool, extra ...string) {
	kv := append([]string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a"}, extra...)
	a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.block(kv...), EndStream: end, EndHeaders: true})
}

// waitFor waits until the server sent a frame summarized as want (or the connection ended).
func (a *attacker) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		for _, s := range a.seen {
			if s == want {
				a.mu.Unlock()
				return
			}
		}
		n := len(a.seen)
		a.mu.Unlock()
		select {
		case <-a.ended:
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, s := range a.seen {
				if s == want {
					return
				}
			}
			t.Fatalf("connection ended without %q; saw %d frames, last %q", want, n, a.seen[max(0, len(a.seen)-3):])
		case <-deadline:
			t.Fatalf("no %q within 10 s", want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestAttacksOverSockets drives every flood the state machine refuses over a real socket,
// on both planes, while a well-behaved client on another connection keeps being answered;
// each attack ends as its limit says and shows in its counter.
func TestAttacksOverSockets(t *testing.T) {
	var ctr h2mux.Counters
	srv := page()
	// The harness writes between reads (blocking, as a goroutine per connection must), so
	// only what one read brings can queue up: a TLS record of 16 KiB holds 963 PINGs, under
	// the default cap. Half of it makes the socket test's floods trip it on both planes.
	srv.Config = h2mux.Config{Counters: &ctr, StallTimeout: 300 * time.Millisecond, MaxQueuedControl: h2mux.DefaultMaxQueuedControl / 2}
	attacks := []struct {
		name    string
		run     func(a *attacker)
		want    string
		counter *atomic.Uint64
	}{
		{"rapid reset (CVE-2023-44487)", func(a *attacker) {
			for i := 0; i < 1000; i++ {
				a.get(uint32(2*i+1), false)
				a.fr.WriteRSTStream(uint32(2*i+1), http2.ErrCodeCancel)
			}
		}, "GOAWAY ENHANCE_YOUR_CALM", &ctr.ResetFloods},
		{"MadeYouReset (CVE-2025-8671)", func(a *attacker) {
			for i := 0; i < 1000; i++ {
				a.get(uint32(2*i+1), false)
				a.fr.WriteWindowUpdate(uint32(2*i+1), 0)
			}
		}, "GOAWAY ENHANCE_YOUR_CALM", &ctr.ResetFloods},
		{"CONTINUATION flood (CVE-2024-27316)", func(a *attacker) {
			a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.block(":method", "GET")})
			frag := bytes.Repeat([]byte{0x82}, 4096)
			for i := 0; i < 100; i++ {
				a.fr.WriteContinuation(1, false, frag)
			}
		}, "GOAWAY ENHANCE_YOUR_CALM", &ctr.ContinuationFloods},
		{"ping flood (CVE-2019-9512)", func(a *attacker) {
			for i := 0; i < 20000; i++ {
				a.fr.WritePing(false, [8]byte{byte(i)})
			}
		}, "GOAWAY ENHANCE_YOUR_CALM", &ctr.ControlFloods},
		{"settings flood (CVE-2019-9515)", func(a *attacker) {
			for i := 0; i < 20000; i++ {
				a.fr.WriteSettings()
			}
		}, "GOAWAY ENHANCE_YOUR_CALM", &ctr.ControlFloods},
		{"empty frames (CVE-2019-9518)", func(a *attacker) {
			a.get(1, false)
			for i := 0; i < 5000; i++ {
				a.fr.WriteData(1, false, nil)
			}
		}, "GOAWAY ENHANCE_YOUR_CALM", &ctr.EmptyFrameFloods},
		{"HPACK bomb", func(a *attacker) {
			a.get(1, true, "x-bomb", strings.Repeat("b", 4000))
			kv := []string{":method", "GET", ":scheme", "https", ":path", "/"}
			for i := 0; i < 1000; i++ {
				kv = append(kv, "x-bomb", strings.Repeat("b", 4000))
			}
			a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: a.block(kv...), EndStream: true, EndHeaders: true})
			a.get(5, true)
		}, "HEADERS 5 200", &ctr.HeadersTooLarge},
		{"zero window (CVE-2019-9517)", func(a *attacker) {
			a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			a.get(1, true)
		}, "RST 1 CANCEL", &ctr.StallResets},
		{"streams past MAX_CONCURRENT_STREAMS", func(a *attacker) {
			a.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			for i := 0; i <= h2mux.DefaultMaxConcurrentStreams; i++ {
				a.get(uint32(2*i+1), true)
			}
		}, fmt.Sprintf("RST %d REFUSED_STREAM", 2*h2mux.DefaultMaxConcurrentStreams+1), &ctr.RefusedStreams},
	}
	for _, p := range planes(t, srv) {
		for _, at := range attacks {
			t.Run(p.name+" "+at.name, func(t *testing.T) {
				before := at.counter.Load()
				stop := make(chan struct{})
				var good, bad atomic.Int64
				var lastErr atomic.Value
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { // the well-behaved client
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						resp, err := p.client.Get(p.url)
						if err == nil {
							_, err = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						if err != nil {
							bad.Add(1)
							lastErr.Store(err)
						} else {
							good.Add(1)
						}
					}
				}()
				a := dialAttacker(t, p)
				at.run(a)
				a.send()
				a.waitFor(t, at.want)
				for deadline := time.Now().Add(5 * time.Second); good.Load() < 20 && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				close(stop)
				wg.Wait()
				if at.counter.Load() == before {
					t.Errorf("the counter did not move")
				}
				if good.Load() < 20 || bad.Load() > 0 {
					t.Errorf("the other client: %d answered, %d failed (%v)", good.Load(), bad.Load(), lastErr.Load())
				}
			})
		}
	}
}
