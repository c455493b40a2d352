package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate/election"
)

const watchSummary = `Print, one line each as they happen, every election's term changes from
etcd (a new leader and its term, a term that ended) and, from fencegate's
/metrics at --endpoint, the writes it refused (fence, reason, how many).
The elections' current leaders come first. Runs until interrupted.

fencegate does not stream its refusals: they are read from the counter
fencegate_rejections_total every --refusal-interval, so a line says how many
writes of a fence were refused for a reason since the previous one, not
their tokens (fencegate's --audit-log has those), and only the replica at
--endpoint is seen. --refusal-interval=0 turns this off.`

// watchEvent is one line of watch's output.
type watchEvent struct {
	Time     time.Time `json:"time"`
	Event    string    `json:"event"` // term, ended, leader, refused
	Election string    `json:"election,omitempty"`
	Fence    string    `json:"fence,omitempty"`
	Term     int64     `json:"term,string,omitempty"`
	Leader   string    `json:"leader,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Count    uint64    `json:"count,omitempty"`
}

func runWatch(ctx context.Context, g *globalConfig, args []string, stdout, stderr io.Writer) error {
	var only string
	interval := time.Second
	c := newCommand(g, "watch", "", watchSummary)
	c.fs.StringVar(&only, "election", "", "only this election (and fence of the same name)")
	c.fs.DurationVar(&interval, "refusal-interval", interval, "how often to read fencegate's refusal counters (0: do not)")
	rest, err := c.parse(args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return c.usageError(stderr, "unexpected argument %q", rest[0])
	}
	if interval < 0 {
		return c.usageError(stderr, "--refusal-interval %v is negative: want a period, or 0 not to read refusals", interval)
	}
	if only != "" {
		if err := election.ValidateName(only); err != nil {
			return c.usageError(stderr, "--election %q: want an election name, without '/'", only)
		}
	}
	cli, err := dialEtcd(ctx, g)
	if err != nil {
		return err
	}
	defer cli.Close()

	// OnChange must not block: events queue here, main prints them.
	events := make(chan watchEvent, 1024)
	emit := func(e watchEvent) {
		select {
		case events <- e:
		default: // a reader this slow loses lines rather than stall the watch
		}
	}
	w, err := election.NewWatcher(cli, election.WatcherConfig{
		Prefix: g.ElectionPrefix,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnChange: func(old, cur election.Term) {
			if only != "" && cur.Election != only {
				return
			}
			e := watchEvent{Time: time.Now(), Election: cur.Election, Term: cur.Rev, Leader: cur.Leader}
			switch {
			case cur.HasLeader() && cur.Rev != old.Rev:
				e.Event = "term"
			case cur.HasLeader():
				e.Event = "leader"
			default:
				e.Event, e.Term = "ended", old.Rev
			}
			emit(e)
		},
	})
	if err != nil {
		return err
	}
	grp, gctx := errgroup.WithContext(ctx)
	grp.Go(func() error { return w.Run(gctx) })
	if interval > 0 {
		gw, err := newGateway(g)
		if err != nil {
			return err
		}
		defer gw.close()
		grp.Go(func() error { return pollRefusals(gctx, gw, interval, only, emit, stderr) })
	}
	for {
		select {
		case e := <-events:
			if err := printEvent(stdout, g, e); err != nil {
				return err
			}
		case <-gctx.Done():
			_ = grp.Wait()
			return nil
		}
	}
}

func printEvent(w io.Writer, g *globalConfig, e watchEvent) error {
	if g.WriteOut == "json" {
		return printJSON(w, e)
	}
	ts := e.Time.UTC().Format("2006-01-02T15:04:05.000Z")
	var err error
	switch e.Event {
	case "refused":
		_, err = fmt.Fprintf(w, "%s  refused  fence=%s reason=%s count=%d\n", ts, shown(e.Fence), shown(e.Reason), e.Count)
	case "ended":
		_, err = fmt.Fprintf(w, "%s  ended    election=%s term=%d\n", ts, shown(e.Election), e.Term)
	default:
		_, err = fmt.Fprintf(w, "%s  %-7s  election=%s term=%d leader=%s\n", ts, e.Event, shown(e.Election), e.Term, shown(e.Leader))
	}
	return err
}

// pollRefusals reads fencegate_rejections_total every interval and emits
// the increases. The first read is the baseline; a counter that went down
// (fencegate restarted) counts from zero. A failing read is reported once
// until one succeeds again.
func pollRefusals(ctx context.Context, gw *gateway, interval time.Duration, only string, emit func(watchEvent), stderr io.Writer) error {
	var last map[[2]string]uint64
	failing := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cur, err := readRejections(ctx, gw)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				fmt.Fprintf(stderr, "fencectl: watch: refusals not shown: %v\n", err)
			}
			failing = true
		default:
			failing = false
			if last != nil {
				now := time.Now()
				for k, n := range cur {
					if only != "" && k[0] != only {
						continue
					}
					d := n
					if prev := last[k]; n >= prev {
						d = n - prev
					}
					if d > 0 {
						emit(watchEvent{Time: now, Event: "refused", Fence: k[0], Reason: strings.ToUpper(k[1]), Count: d})
					}
				}
			}
			last = cur
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// readRejections reads fencegate_rejections_total{fence, reason} from
// fencegate's /metrics.
func readRejections(ctx context.Context, gw *gateway) (map[[2]string]uint64, error) {
	code, body, err := gw.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, refusal(code, http.MethodGet, "/metrics", body)
	}
	return parseRejections(body), nil
}

// parseRejections picks the samples of fencegate_rejections_total out of
// Prometheus' text format.
func parseRejections(body []byte) map[[2]string]uint64 {
	out := map[[2]string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	const name = "fencegate_rejections_total{"
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		labels, value, ok := cutLabels(line)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil || f < 0 {
			continue
		}
		out[[2]string{labels["fence"], labels["reason"]}] += uint64(f)
	}
	return out
}

// cutLabels parses `a="x",b="y"} rest` into the labels and rest.
func cutLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, ", ")
		if rest, ok := strings.CutPrefix(s, "}"); ok {
			if strings.TrimSpace(rest) == "" {
				return nil, "", false
			}
			return labels, rest, true
		}
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			return nil, "", false
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(rest[i])
				}
				continue
			}
			v.WriteByte(rest[i])
		}
		if i == len(rest) {
			return nil, "", false
		}
		labels[name] = v.String()
		s = rest[i+1:]
	}
}
