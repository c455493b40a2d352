package pgwire

// PeakQueued is the longest outstanding-request queue any ended session
// had.
func (s *Server) PeakQueued() int64 { return s.peakQueued.Load() }

// MaxOutstanding is the queue's bound.
const MaxOutstanding = maxOutstanding

// SetTestHookEnding sets a function endTransaction calls after it decided
// to end a transaction, before it closes the server connection.
func (s *Server) SetTestHookEnding(f func()) { s.testHookEnding = f }

// MaxDeferrals bounds the statements that set up a transaction before its
// check.
const MaxDeferrals = maxDeferrals

// SetTestPrepareCheckOnce makes sessions prepare their check for their
// first transaction only, so that a statement of the session's can
// replace it.
func (s *Server) SetTestPrepareCheckOnce() { s.testPrepareOnce.Store(true) }

// SetTestHookAnswering sets a function S2C calls after it took a
// ReadyForQuery off the queue, before it writes it to the client.
func (s *Server) SetTestHookAnswering(f func()) { s.testHookAnswering = f }

// SetTestHookReply sets a function S2C calls, with the queue's lock held,
// as it matches each server message with the queue.
func (s *Server) SetTestHookReply(f func(t byte)) { s.testHookReply = f }
