// Package proxy is fencegate's write pipeline: it validates a fenced write,
// decides on its token from what this replica knows (the election watch and
// the high-water marks it has seen), asks etcd about tokens above everything
// it knows, and hands accepted writes to a backend, which checks the token
// again atomically with the write. It records metrics and logs every refusal.
//
// The decision made here only ever refuses early. What makes a write safe
// across any number of replicas is the backend's check (proxy/postgres,
// proxy/redis), which runs in the same transaction or script as the write.
//
// What the pipeline guarantees besides:
//
//   - A write is decided on again, from memory, as it is about to be sent:
//     one that waited in a backend's queue, or for a connection, while its
//     term ended is refused then (STALE_TOKEN or TERM_ENDED), nothing sent,
//     as the PostgreSQL listener's open transactions are (Admission.Ended).
//   - The in-memory marks are kept per backend, and a mark a backend reports
//     with a stale-token refusal is used only if it is not above the highest
//     term the term source has shown for the election. Anyone able to raise
//     a mark in a backend (by SQL, or by writing the Redis token key) can
//     make that backend refuse writes, but cannot make this replica refuse
//     the real leader from memory, on that backend or the other. Such marks
//     are counted in fencegate_suspect_high_water_total{backend} and logged
//     (identical lines at most once a second).
//   - The etcd reads that verify a token above every known term are limited
//     per fence by a token bucket (Config.VerifyRate, VerifyBurst), with at
//     most Config.VerifyFences buckets in memory; fences beyond share one.
//     A write over the limit is refused with OVERLOADED.
//   - Metric series are bounded by what the replica knows, not by what
//     clients send. fencegate_rejections_total{fence, reason} carries the
//     fence's name only for a fence whose election the term source knows or
//     that has a mark in memory; any other name, valid or not, is counted
//     under fence="_other" (OtherFences). fencegate_fence_high_water{fence}
//     lists only fences with a mark in memory, which are fences of known
//     elections.
package proxy
