// Package examples holds workers in other languages than Go, each taking
// leadership in etcd and writing through fencegate, each showing a
// zombie's write refused: shell/ (a job under `fencectl run`), python/
// (python3-etcd3 and requests) and node/ (npm etcd3 and fetch). Its test
// runs them all against `fencegate dev`. See README.md beside it.
package examples
