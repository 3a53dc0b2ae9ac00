package peertest

import "testing"

// TestDNSQuery pins the DNS encoder: the exact query bytes.
func TestDNSQuery(t *testing.T) {
	want := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, 'w', 'w', 'w', 1, 'b', 0, 0, 1, 0, 1}
	if got := DNSQuery(0x1234, "www.b"); string(got) != string(want) {
		t.Fatalf("query %x", got)
	}
}

// TestDNSAnswerA decodes a response with a compressed name and refuses a short or failed one.
func TestDNSAnswerA(t *testing.T) {
	q := DNSQuery(7, "www.b")
	resp := append([]byte(nil), q...)
	resp[2], resp[7] = 0x81, 1 // QR+RD, one answer
	resp = append(resp, 0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 9)
	id, a, err := DNSAnswerA(resp)
	if err != nil || id != 7 || a.String() != "10.0.0.9" {
		t.Fatalf("got %d %v %v", id, a, err)
	}
	if _, _, err := DNSAnswerA(resp[:5]); err == nil {
		t.Error("a short response decoded")
	}
	if _, _, err := DNSAnswerA(q); err == nil {
		t.Error("a query (QR clear) decoded as a response")
	}
}
