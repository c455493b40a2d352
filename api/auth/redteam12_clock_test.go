package auth_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth"
)

// TestRedTeam12TokenRevocationSurvivesClockStepBack: the token file is
// looked at "at most once a second" (SECURITY.md, Reloads), so a secret
// removed from it stops working within about a second. The reloader keeps
// the time of its next look as wall-clock Unix nanoseconds
// (reloader.nextAt, r.now().UnixNano(), which drops the monotonic
// reading): when the wall clock is stepped back (NTP correcting a clock
// that ran fast, a VM restored), the next look waits until the wall clock
// has caught up again. Stepped back an hour, a revoked secret keeps
// authenticating for that hour, though seconds of real time pass. (The
// same reloader serves --cert-file/--trusted-ca-file: a CA removed from
// the bundle keeps admitting new handshakes as long.) The clock here is
// the Authenticator's, standing for time.Now.
func TestRedTeam12TokenRevocationSurvivesClockStepBack(t *testing.T) {
	path := tokenFile(t, tokenLines("revoked", "s3cret-revoked", "kept", "s3cret-kept"))
	clk := newClock()
	a, err := auth.NewAuthenticator(false, path, nil, auth.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Identify(nil, "Bearer s3cret-revoked", nil).Principal; got != "token:revoked" {
		t.Fatalf("control: got %q, want token:revoked", got)
	}
	// A look at the file a second later, as any request makes.
	clk.advance(time.Second)
	if got := a.Identify(nil, "Bearer s3cret-kept", nil).Principal; got != "token:kept" {
		t.Fatalf("control: got %q, want token:kept", got)
	}

	// The wall clock is stepped back an hour; then the operator revokes
	// the secret, renaming a complete file into place as documented.
	clk.advance(-time.Hour)
	install(t, path, tokenLines("kept", "s3cret-kept"))

	// Ten seconds of real time pass, with requests all along.
	for i := 0; i < 10; i++ {
		clk.advance(time.Second)
		a.Identify(nil, "Bearer s3cret-kept", nil)
	}
	if got := a.Identify(nil, "Bearer s3cret-revoked", nil).Principal; got != "" {
		t.Errorf("HOLE: 10 s after the secret was removed from --token-auth-file, it still authenticates as %q "+
			"(the wall clock was stepped back 1 h; the file will next be looked at when it has caught up)", got)
	}
}
