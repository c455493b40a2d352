package resp

// SetTestHookCommand sets a function a session calls as it is about to
// run a command it read.
func (s *Server) SetTestHookCommand(f func(args []string)) { s.testHookCommand = f }
