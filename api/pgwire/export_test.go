package pgwire

// PeakQueued is the longest outstanding-request queue any ended session
// had.
func (s *Server) PeakQueued() int64 { return s.peakQueued.Load() }

// MaxOutstanding is the queue's bound.
const MaxOutstanding = maxOutstanding
