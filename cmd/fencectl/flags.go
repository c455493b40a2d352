package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/addrflag"
	"github.com/fencegate/fencegate/cmd/internal/flagerr"
)

// globalConfig is what every command may need: where fencegate and etcd
// are, how to prove who we are to each, and how to print.
type globalConfig struct {
	Endpoint string // fencegate's HTTP address
	CACert   string // trust for fencegate's TLS certificate
	Cert     string // client certificate toward fencegate (mTLS)
	Key      string
	Token    string // bearer secret toward fencegate

	EtcdEndpoints string
	EtcdCACert    string
	EtcdCert      string
	EtcdKey       string
	EtcdUser      string
	EtcdPassword  string

	ElectionPrefix string
	DialTimeout    time.Duration
	CommandTimeout time.Duration
	WriteOut       string

	set map[string]bool // flags given on the command line
}

func defaultGlobalConfig() *globalConfig {
	return &globalConfig{
		Endpoint:       "http://127.0.0.1:7080",
		EtcdEndpoints:  "127.0.0.1:2379",
		ElectionPrefix: "/fencegate/elections",
		DialTimeout:    5 * time.Second,
		CommandTimeout: 5 * time.Second,
		WriteOut:       "table",
		set:            map[string]bool{},
	}
}

func (g *globalConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&g.Endpoint, "endpoint", g.Endpoint, "fencegate's HTTP address (https:// when it serves TLS)")
	fs.StringVar(&g.CACert, "cacert", g.CACert, "CA bundle (PEM) to verify fencegate's certificate with (default: the system's)")
	fs.StringVar(&g.Cert, "cert", g.Cert, "client certificate (PEM) to present to fencegate (mTLS)")
	fs.StringVar(&g.Key, "key", g.Key, "key (PEM) of --cert")
	fs.StringVar(&g.Token, "token", g.Token, "bearer secret for fencegate's --token-auth-file (better in FENCECTL_TOKEN than on the command line); sent only over https:// or to a loopback address")
	fs.StringVar(&g.EtcdEndpoints, "etcd-endpoints", g.EtcdEndpoints, "comma-separated etcd client endpoints")
	fs.StringVar(&g.EtcdCACert, "etcd-cacert", g.EtcdCACert, "CA bundle (PEM) to verify etcd's certificate with")
	fs.StringVar(&g.EtcdCert, "etcd-cert", g.EtcdCert, "client certificate (PEM) to present to etcd")
	fs.StringVar(&g.EtcdKey, "etcd-key", g.EtcdKey, "key (PEM) of --etcd-cert")
	fs.StringVar(&g.EtcdUser, "etcd-user", g.EtcdUser, "etcd user name (etcd authentication)")
	fs.StringVar(&g.EtcdPassword, "etcd-password", g.EtcdPassword, "etcd password of --etcd-user (better in FENCECTL_ETCD_PASSWORD)")
	fs.StringVar(&g.ElectionPrefix, "election-prefix", g.ElectionPrefix, "elections live under `<prefix>`/<name>/ (as fencegate's flag)")
	fs.DurationVar(&g.DialTimeout, "dial-timeout", g.DialTimeout, "how long to wait for etcd to answer at start")
	fs.DurationVar(&g.CommandTimeout, "command-timeout", g.CommandTimeout, "time limit of each request to fencegate or etcd")
	fs.StringVar(&g.WriteOut, "write-out", g.WriteOut, "output format: table or json (one JSON object per line for watch)")
	fs.StringVar(&g.WriteOut, "w", g.WriteOut, "short for --write-out")
}

// parseLeading parses the global flags that come before the command and
// returns the rest, command first.
func (g *globalConfig) parseLeading(args []string, stdout, stderr io.Writer) ([]string, error) {
	fs := flag.NewFlagSet("fencectl", flag.ContinueOnError)
	g.register(fs)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage())
			return nil, flag.ErrHelp
		}
		fmt.Fprintf(stderr, "fencectl: %s\nRun 'fencectl --help' for usage.\n", flagerr.Explain(err, fs))
		return nil, errUsage
	}
	fs.Visit(func(f *flag.Flag) { g.set[f.Name] = true })
	return fs.Args(), nil
}

// command is one subcommand's flag set: the global flags plus its own.
type command struct {
	fs      *flag.FlagSet
	g       *globalConfig
	args    string // positional arguments, for the usage line
	summary string
	// interspersed lets flags follow positional arguments.
	interspersed bool
	// checkGlobals: parse validates the global flags.
	checkGlobals bool
}

func newCommand(g *globalConfig, name, args, summary string) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &command{fs: fs, g: g, args: args, summary: summary, interspersed: true, checkGlobals: true}
}

// parse parses args (globals included), fills every flag not given on the
// command line from FENCECTL_<FLAG> (upper case, '-' as '_'), checks the
// globals (unless !checkGlobals: then a FENCECTL_<FLAG> that does not
// parse is ignored too) and returns the positional arguments.
// --help prints the usage to stdout. A flag given both before the command
// and after it takes the later value. A mistake is a usage error: one
// line on stderr, and errUsage.
func (c *command) parse(args []string, stdout, stderr io.Writer) ([]string, error) {
	fs := c.fs
	own := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	fs.VisitAll(func(f *flag.Flag) { own.Var(f.Value, f.Name, f.Usage) })
	c.g.register(fs)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: %s\n\n%s\n", strings.TrimSpace("fencectl "+fs.Name()+" [flags] "+c.args), c.summary)
		n := 0
		own.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(out, "\nFlags (each also read from FENCECTL_<FLAG>):\n")
			own.SetOutput(out)
			own.PrintDefaults()
		}
		fmt.Fprintf(out, "\nGlobal flags (--endpoint, --etcd-endpoints, TLS, -w json, ...): see 'fencectl --help'.\n")
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "-help" {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, flag.ErrHelp
		}
	}
	// Flags may follow positional arguments (`fence get NAME -w json`),
	// except in run, where the first one starts CMD; "--" ends flags.
	var positional []string
	fs.SetOutput(io.Discard) // a parse error is one line, below
	for {
		before := args
		if err := fs.Parse(args); err != nil {
			return nil, c.usageError(stderr, "%s", flagerr.Explain(err, fs))
		}
		args = fs.Args()
		consumed := len(before) - len(args)
		if !c.interspersed || len(args) == 0 || (consumed > 0 && before[consumed-1] == "--") {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	positional = append(positional, args...)
	fs.Visit(func(f *flag.Flag) { c.g.set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if c.g.set[f.Name] || err != nil || f.Name == "w" {
			return
		}
		if f.Name == "write-out" && c.g.set["w"] {
			return
		}
		env := "FENCECTL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			// Without checkGlobals (version) a bad setting is ignored.
			if e := fs.Set(f.Name, v); e != nil && c.checkGlobals {
				err = fmt.Errorf("%s=%q (--%s): %s", env, v, f.Name, flagerr.Reason(f, e.Error()))
			}
		}
	})
	if err != nil {
		return nil, c.usageError(stderr, "%v", err)
	}
	if c.checkGlobals {
		if err := c.g.validate(); err != nil {
			return nil, c.usageError(stderr, "%v", err)
		}
	}
	return positional, nil
}

// usageError prints msg, on one line, and where to read the command's
// usage, as kubectl does, and returns errUsage: main exits 2.
func (c *command) usageError(stderr io.Writer, format string, a ...any) error {
	name := c.fs.Name()
	fmt.Fprintf(stderr, "fencectl %s: %s\nRun 'fencectl %s --help' for usage.\n", name, fmt.Sprintf(format, a...), name)
	return errUsage
}

func (g *globalConfig) validate() error {
	switch g.WriteOut {
	case "table", "json":
	default:
		return fmt.Errorf("--write-out %q: want table or json", g.WriteOut)
	}
	given := g.Endpoint
	if g.Endpoint != "" && !strings.Contains(g.Endpoint, "://") {
		// host:port, as fencegate's --http-addr and etcdctl's endpoints
		// are written: https when a CA or certificate is given.
		scheme := "http://"
		if g.CACert != "" || g.Cert != "" {
			scheme = "https://"
		}
		g.Endpoint = scheme + g.Endpoint
	}
	if err := checkEndpoint(g.Endpoint); err != nil {
		// The value as given, not with the scheme added above.
		return fmt.Errorf("--endpoint %q: %w; want host:port or a URL such as http://127.0.0.1:7080", addrflag.Redact(given), err)
	}
	if g.Token != "" && !strings.HasPrefix(g.Endpoint, "https://") && !loopbackURL(g.Endpoint) {
		return fmt.Errorf("--token would go in plain text to %s, where anyone on the path may read it: use an https:// --endpoint (with --cacert), or a loopback address", addrflag.Redact(g.Endpoint))
	}
	if (g.Cert == "") != (g.Key == "") {
		return fmt.Errorf("--cert and --key go together")
	}
	if (g.EtcdCert == "") != (g.EtcdKey == "") {
		return fmt.Errorf("--etcd-cert and --etcd-key go together")
	}
	if len(g.etcdEndpoints()) == 0 {
		return fmt.Errorf("--etcd-endpoints is empty")
	}
	if err := addrflag.EtcdEndpoints("--etcd-endpoints", g.EtcdEndpoints); errors.Is(err, addrflag.ErrCredentials) {
		return fmt.Errorf("%w (the password best as FENCECTL_ETCD_PASSWORD, which ps does not show)", err)
	} else if err != nil {
		return err
	}
	if g.DialTimeout <= 0 {
		return fmt.Errorf("--dial-timeout %v: want a positive duration", g.DialTimeout)
	}
	if g.CommandTimeout <= 0 {
		return fmt.Errorf("--command-timeout %v: want a positive duration", g.CommandTimeout)
	}
	if g.ElectionPrefix == "" || strings.HasSuffix(g.ElectionPrefix, "/") {
		return fmt.Errorf("--election-prefix %q: want a key prefix not ending in '/'", g.ElectionPrefix)
	}
	return nil
}

// loopbackURL reports whether endpoint's host is localhost or a loopback
// address.
func loopbackURL(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkEndpoint checks fencegate's address as an http:// or https:// URL
// with a host and a valid port, if any; the reason when it is not.
func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err
		}
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q, not http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("no host")
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil {
		if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
			return fmt.Errorf("bad port %q", port)
		}
	} else if strings.Count(u.Host, ":") > 1 && !strings.HasPrefix(u.Host, "[") {
		return errors.New("too many colons")
	}
	return nil
}

func (g *globalConfig) etcdEndpoints() []string {
	var out []string
	for _, e := range strings.Split(g.EtcdEndpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
