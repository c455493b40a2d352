package election

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// DefaultResetPrefix is where fence resets are published in etcd.
const DefaultResetPrefix = "/fencegate/resets/"

// Resets carries fence resets between replicas through etcd: the replica
// that reset a fence's backends puts <prefix><fence> = <mark>, and every
// other replica watching lowers what it remembers of the fence. A replica that
// starts later remembers nothing to lower.
type Resets struct {
	cli    *clientv3.Client
	prefix string
	log    *slog.Logger
	// id tells this replica's own resets apart when they come back.
	id string
}

// NewResets publishes and watches resets under prefix (DefaultResetPrefix
// when empty).
func NewResets(cli *clientv3.Client, prefix string, log *slog.Logger) *Resets {
	if prefix == "" {
		prefix = DefaultResetPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Resets{cli: cli, prefix: prefix, log: log, id: hex.EncodeToString(b[:])}
}

// PublishReset tells the other replicas that fence was reset to mark.
func (r *Resets) PublishReset(ctx context.Context, fence string, mark int64) error {
	_, err := r.cli.Put(ctx, r.prefix+fence, strconv.FormatInt(mark, 10)+" by="+r.id)
	return err
}

// Start calls lower, in a goroutine of its own, for every reset published
// after Start returned, until ctx is done (done is closed then); it
// watches again after an interruption. It fails when etcd cannot be read.
func (r *Resets) Start(ctx context.Context, lower func(fence string, mark int64)) (done <-chan struct{}, err error) {
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		r.watch(ctx, resp.Header.Revision, lower)
	}()
	return ch, nil
}

func (r *Resets) watch(ctx context.Context, rev int64, lower func(fence string, mark int64)) {
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(rev + 1)}
		// A watch stream of its own: one starting above the store's
		// revision would hold back etcd's answers to the election
		// watcher's progress requests on a shared stream.
		wctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "fencegate-watch", "resets")
		for resp := range r.cli.Watch(wctx, r.prefix, opts...) {
			if err := resp.Err(); err != nil {
				if errors.Is(err, context.Canceled) {
					return
				}
				r.log.Warn("fence reset watch interrupted", "err", err)
				if resp.CompactRevision > 0 {
					// The resets after rev are gone from etcd's history
					// (compacted while this replica was cut off): each
					// fence's last one is still its key's value. Until
					// they are read, the watch starts at rev again.
					if rev, err = r.catchUp(ctx, rev, lower); err != nil {
						r.log.Warn("fence resets: cannot read them after a compaction", "err", err)
					}
				}
				break
			}
			rev = resp.Header.Revision
			for _, ev := range resp.Events {
				r.apply(ev.Kv, lower)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// catchUp lowers every fence whose reset key changed after revision since,
// from the keys as they are now, and returns the revision read.
func (r *Resets) catchUp(ctx context.Context, since int64, lower func(fence string, mark int64)) (int64, error) {
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return since, err
	}
	for _, kv := range resp.Kvs {
		if kv.ModRevision > since {
			r.apply(kv, lower)
		}
	}
	return resp.Header.Revision, nil
}

// apply lowers the fence of a reset key another replica put.
func (r *Resets) apply(kv *mvccpb.KeyValue, lower func(fence string, mark int64)) {
	fence := strings.TrimPrefix(string(kv.Key), r.prefix)
	v, by, _ := strings.Cut(string(kv.Value), " by=")
	if by == r.id {
		return
	}
	mark, err := strconv.ParseInt(v, 10, 64)
	if err != nil || mark < 0 || fence == "" {
		r.log.Warn("fence reset: ignored", "key", string(kv.Key), "value", string(kv.Value))
		return
	}
	lower(fence, mark)
}
