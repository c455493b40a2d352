package election_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/embedded"
)

func ExampleCampaign() {
	ctx := context.Background()
	// An in-process etcd, as `fencegate dev` runs; any etcd cluster will do.
	dir, err := os.MkdirTemp("", "example-etcd-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(ctx, embedded.Config{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	l, err := election.Campaign(ctx, client, election.CampaignConfig{Election: "jobs", Value: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	// Send l.Token() with every write, and stop writing when l.Done()
	// closes; run the work under l.Context().
	fmt.Println("leader with a token:", l.Token() > 0)

	if err := l.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	<-l.Done()
	fmt.Println(l.Err())
	// Output:
	// leader with a token: true
	// election: resigned
}
