package policy

// Decision is what the policy says of one request. (Placeholder until the
// policy package lands; same shape.)
type Decision struct {
	Allowed bool
	Rule    string
	Role    string
}
