package serverproc

import "testing"

func TestFreePortBelowEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo == 0 {
		t.Fatal("cannot read net.ipv4.ip_local_port_range")
	}
	for range 20 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if lo > minPort && (p < minPort || p >= lo) {
			t.Fatalf("port %d: want one in [%d, %d), below the ephemeral range", p, minPort, lo)
		}
	}
}
