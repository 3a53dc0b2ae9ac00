package httpcore

import (
	"net"
	"os"
	"strings"
	"testing"
)

// fields is a message's fields for the core's tests: an ordered list, names compared without
// regard to case, as an engine's are.
type fields struct{ kv [][2]string }

func (f *fields) Peek(name []byte) []byte {
	for _, kv := range f.kv {
		if strings.EqualFold(kv[0], string(name)) {
			return []byte(kv[1])
		}
	}
	return nil
}

func (f *fields) AppendValues(dst, name []byte) []byte {
	n := 0
	for _, kv := range f.kv {
		if strings.EqualFold(kv[0], string(name)) && kv[1] != "" {
			if n > 0 {
				dst = append(dst, ", "...)
			}
			dst = append(dst, kv[1]...)
			n++
		}
	}
	return dst
}

func (f *fields) Set(name, value []byte) {
	f.Del(name)
	f.Add(name, value)
}

func (f *fields) Add(name, value []byte) { f.kv = append(f.kv, [2]string{string(name), string(value)}) }

func (f *fields) Del(name []byte) {
	out := f.kv[:0]
	for _, kv := range f.kv {
		if !strings.EqualFold(kv[0], string(name)) {
			out = append(out, kv)
		}
	}
	f.kv = out
}

func (f *fields) get(name string) string { return string(f.AppendValues(nil, []byte(name))) }

// testReq is a Request for the core's tests.
type testReq struct {
	fields
	method, host, target, proto string
	cl                          int64
}

func newReq(method, target string, kv ...string) *testReq {
	r := &testReq{method: method, host: "app.test", target: target, proto: "HTTP/1.1"}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Add([]byte(kv[i]), []byte(kv[i+1]))
	}
	return r
}

func (r *testReq) Method() []byte         { return []byte(r.method) }
func (r *testReq) Host() []byte           { return []byte(r.host) }
func (r *testReq) Target() []byte         { return []byte(r.target) }
func (r *testReq) SetTarget(t []byte)     { r.target = string(t) }
func (r *testReq) Proto() []byte          { return []byte(r.proto) }
func (r *testReq) ContentLength() int64   { return r.cl }
func (r *testReq) Cookie(n []byte) []byte { return CookieValue(r.Peek(keyCookie), n) }
func (r *testReq) LocalAddr() net.Addr    { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (r *testReq) scan() (s Scan) {
	for _, kv := range r.kv {
		s.Note([]byte(kv[0]))
	}
	return s
}

// testResp is a Response for the core's tests.
type testResp struct {
	fields
	status int
	cl     int64
}

func (r *testResp) Status() int          { return r.status }
func (r *testResp) ContentLength() int64 { return r.cl }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
