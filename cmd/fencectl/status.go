package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

const statusSummary = `Show fencegate's health (/healthz) and readiness (/readyz, with the reason
when not ready), etcd's version and revision, and every election under
--election-prefix with its leader and term as etcd has them now, beside
the fence's high-water mark as fencegate reports it. Exits 1 when
fencegate is not ready or etcd cannot be read.

fencegate does not expose its own version over HTTP; the version shown is
fencectl's.`

// statusReport is what status prints with -w json.
type statusReport struct {
	Fencectl  string          `json:"fencectl"`
	Endpoint  string          `json:"endpoint"`
	Healthy   bool            `json:"healthy"`
	Ready     bool            `json:"ready"`
	NotReady  string          `json:"notReady,omitempty"` // why, when not ready
	Etcd      string          `json:"etcd"`
	EtcdError string          `json:"etcdError,omitempty"`
	Version   string          `json:"etcdVersion,omitempty"`
	Revision  int64           `json:"revision,string"`
	Elections []electionState `json:"elections"`
}

type electionState struct {
	leader
	HighWater uint64 `json:"highWater,string"`
}

func runStatus(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	c := newCommand(g, "status", "", statusSummary)
	rest, err := c.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return c.usageError(stderr, "unexpected argument %q", rest[0])
	}
	r := statusReport{Fencectl: version(), Endpoint: g.Endpoint, Etcd: g.EtcdEndpoints, Elections: []electionState{}}

	gw, err := newGateway(g)
	if err != nil {
		return err
	}
	defer gw.close()
	highWater := map[string]uint64{}
	if code, _, err := gw.get(ctx, "/healthz"); err != nil {
		r.NotReady = err.Error()
	} else {
		r.Healthy = code == http.StatusOK
		code, body, err := gw.get(ctx, "/readyz")
		switch {
		case err != nil:
			r.NotReady = err.Error()
		case code == http.StatusOK:
			r.Ready = true
		default:
			r.NotReady = strings.TrimSpace(strings.TrimPrefix(string(body), "not ready:"))
		}
		if fs, err := gw.listFences(ctx); err == nil {
			for _, f := range fs {
				highWater[f.Name] = f.HighWater
			}
		}
	}

	if err := readEtcd(ctx, g, &r); err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		r.EtcdError = err.Error()
	}
	for i := range r.Elections {
		r.Elections[i].HighWater = highWater[r.Elections[i].Election]
	}

	if g.WriteOut == "json" {
		if err := printJSON(stdout, r); err != nil {
			return err
		}
	} else if err := printStatus(stdout, r); err != nil {
		return err
	}
	if !r.Ready || r.EtcdError != "" {
		return &exitError{code: 1}
	}
	return nil
}

func readEtcd(ctx context.Context, g *globalConfig, r *statusReport) error {
	cli, err := dialEtcd(ctx, g)
	if err != nil {
		return err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, g.CommandTimeout)
	defer cancel()
	if st, err := cli.Status(cctx, g.etcdEndpoints()[0]); err == nil {
		r.Version = st.Version
	}
	ls, rev, err := listLeaders(cctx, cli, g.ElectionPrefix)
	if err != nil {
		return err
	}
	r.Revision = rev
	for _, l := range ls {
		r.Elections = append(r.Elections, electionState{leader: l})
	}
	return nil
}

func printStatus(w io.Writer, r statusReport) error {
	state := "ready"
	switch {
	case !r.Healthy && r.NotReady != "":
		state = "unreachable: " + r.NotReady
	case !r.Ready:
		state = "NOT READY: " + r.NotReady
	}
	etcd := fmt.Sprintf("etcd %s, revision %d", r.Version, r.Revision)
	if r.EtcdError != "" {
		etcd = "UNREACHABLE: " + r.EtcdError
	}
	fmt.Fprintf(w, "fencegate  %s  %s\n", r.Endpoint, state)
	fmt.Fprintf(w, "etcd       %s  %s\n", r.Etcd, etcd)
	fmt.Fprintf(w, "fencectl   %s\n\n", r.Fencectl)
	rows := make([][]string, 0, len(r.Elections))
	for _, e := range r.Elections {
		rows = append(rows, []string{e.Election, orDash(e.Leader), num(e.Term), fmt.Sprint(e.Candidates), num(e.HighWater)})
	}
	return table(w, []string{"ELECTION", "LEADER", "TERM", "CANDIDATES", "HIGH-WATER"}, rows)
}
