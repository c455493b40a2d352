package election

import (
	"context"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// firstStream is the etcd watch service as one clientv3.Watcher sees it,
// reporting the end of the first stream it opens (lost).
//
// clientv3's Watcher hides the loss of its stream: it opens another and
// resumes each watch on it from the revision after the last it delivered.
// On the etcd it was watching that is seamless. On an etcd restored from a
// backup without --bump-revision, whose revision has passed that one by the
// time the watch resumes, it is not: the resumed watch delivers the new
// history's events on top of the candidates of the old one, and a leader
// whose key is gone from the new history stays current in memory for good.
// Nothing in the resumed watch's answers tells the two apart, so the
// Watcher takes no answer from a stream but the first: once it ends, the
// session ends and the prefix is listed again.
type firstStream struct {
	pb.WatchClient

	once   sync.Once
	lost   chan struct{} // closed when the first stream ends, or a second opens
	opened atomic.Bool
}

func newFirstStream(wc pb.WatchClient) *firstStream {
	return &firstStream{WatchClient: wc, lost: make(chan struct{})}
}

func (s *firstStream) end() { s.once.Do(func() { close(s.lost) }) }

// ended reports whether the first stream ended: any answer received after
// that may come from a resumed stream.
func (s *firstStream) ended() bool {
	select {
	case <-s.lost:
		return true
	default:
		return false
	}
}

// Watch opens a watch stream. A stream opened after the first is the
// resumption firstStream exists to report; it is reported before it is
// returned, so before any of its answers can be.
func (s *firstStream) Watch(ctx context.Context, opts ...grpc.CallOption) (pb.Watch_WatchClient, error) {
	wc, err := s.WatchClient.Watch(ctx, opts...)
	if err != nil {
		return nil, err
	}
	if !s.opened.CompareAndSwap(false, true) {
		s.end()
		return wc, nil
	}
	return &reportingStream{Watch_WatchClient: wc, s: s}, nil
}

// reportingStream is the first stream; it reports its end when Recv fails.
type reportingStream struct {
	pb.Watch_WatchClient
	s *firstStream
}

func (r *reportingStream) Recv() (*pb.WatchResponse, error) {
	resp, err := r.Watch_WatchClient.Recv()
	if err != nil {
		r.s.end()
	}
	return resp, err
}
