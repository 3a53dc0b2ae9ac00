package discovery

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzDNSAnswer: whatever a resolver sends back (the fuzzer's bytes, with the query's ID) never
// panics a DNS source, and what it accepts is bounded by max_backends with valid addresses.
func FuzzDNSAnswer(f *testing.F) {
	good := new(dns.Msg)
	good.SetQuestion("api.ballast.test.", dns.TypeSRV)
	good.Response = true
	rr, _ := dns.NewRR("api.ballast.test. 5 IN SRV 10 5 8081 b1.ballast.test.")
	a, _ := dns.NewRR("b1.ballast.test. 5 IN A 127.0.0.11")
	good.Answer, good.Extra = []dns.RR{rr}, []dns.RR{a}
	seed, _ := good.Pack()
	f.Add(seed)
	f.Add([]byte{0, 0, 0x81, 0x80, 0, 1, 0xff, 0xff, 0, 0, 0, 0})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer pc.Close()
	answer := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var out []byte
			select {
			case out = <-answer:
			default:
				continue
			}
			if n >= 2 && len(out) >= 2 {
				out = append([]byte(nil), out...)
				out[0], out[1] = buf[0], buf[1]
			}
			_, _ = pc.WriteTo(out, from)
		}
	}()
	f.Fuzz(func(t *testing.T, msg []byte) {
		for _, typ := range []string{TypeSRV, TypeA} {
			d := &DNS{Name: "api.ballast.test", Type: typ, Port: 80, Resolvers: []string{pc.LocalAddr().String()},
				MinTTL: time.Second, MaxTTL: time.Minute, Timeout: 50 * time.Millisecond, Max: 3}
			select {
			case answer <- msg:
			default:
			}
			ans, err := d.Fetch(context.Background())
			select { // an answer the source never asked for must not be left for the next run
			case <-answer:
			default:
			}
			if err != nil {
				continue
			}
			if len(ans.Backends) == 0 || len(ans.Backends) > 3 || ans.Next < time.Second || ans.Next > time.Minute {
				t.Fatalf("%s answer %+v", typ, ans)
			}
			for _, b := range ans.Backends {
				if _, err := net.ResolveTCPAddr("tcp", b.Address); err != nil || b.Weight < 1 || b.Weight > 10000 {
					t.Fatalf("backend %+v", b)
				}
			}
		}
	})
}
