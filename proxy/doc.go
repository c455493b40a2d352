// Package proxy is fencegate's write pipeline: it validates a fenced write,
// decides on its token from what this replica knows (the election watch and
// the high-water marks it has seen), asks etcd about tokens above everything
// it knows, and hands accepted writes to a backend, which checks the token
// again atomically with the write. It records metrics and logs every refusal.
//
// The decision made here only ever refuses early. What makes a write safe
// across any number of replicas is the backend's check (proxy/postgres,
// proxy/redis), which runs in the same transaction or script as the write.
package proxy
