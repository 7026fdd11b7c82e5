package testredis

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// lowestPort is the least port Listen and FreeAddr draw from.
const lowestPort = 10000

// Listen listens on a free loopback port below the host's ephemeral range
// (ip_local_port_range), for a server a test may stop and start again at
// the same address: no outgoing connection is ever given such a port
// while it lies free, where one freed from the ephemeral range may be
// (seen on a loaded host: a stopped daemon's replacement refused with
// "address already in use"). Another process drawing the same port at
// random is what remains, and a port in use is passed over.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	hi := ephemeralLow()
	if hi-lowestPort < 1000 { // no room below the range: the kernel's choice
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var err error
	for range 100 {
		var l net.Listener
		if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lowestPort+rand.IntN(hi-lowestPort))); err == nil {
			return l
		}
	}
	t.Fatalf("no free loopback port in %d-%d after 100 tries: %v", lowestPort, hi-1, err)
	return nil
}

// FreeAddr returns a loopback address nothing listens on (Listen's, the
// listener closed), for a server the test starts itself.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l := Listen(t)
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// ephemeralLow is the first port of the host's ephemeral range: Linux's
// ip_local_port_range, or 32768 (Linux's default, and below every other
// system's) where it cannot be read.
func ephemeralLow() int {
	var lo, hi int
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if n, _ := fmt.Sscan(string(b), &lo, &hi); n == 2 && lo > 0 {
			return lo
		}
	}
	return 32768
}
