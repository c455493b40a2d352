// Package deploy holds no code: it is fencegate's deployment files
// (container/, kubernetes/, compose/, grafana/, prometheus/, systemd/) and
// the tests that check them against the fencegate this tree builds.
//
// The tests build fencegate by running the Dockerfile's build stage
// (no container engine needed), decode every manifest strictly, check each
// flag they pass against `fencegate serve --help`, and run the Grafana
// dashboard's queries and the alert rules on a real Prometheus scraping a
// real fencegate. They do not run the image, a Kubernetes cluster or
// Compose: nothing here has a container engine.
package deploy
