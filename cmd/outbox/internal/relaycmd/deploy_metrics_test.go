package relaycmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// deployDir holds the deployment examples, from this package's directory.
const deployDir = "../../../../deploy"

var (
	rulesPath     = filepath.Join(deployDir, "prometheus", "outbox-rules.yml")
	rulesTestPath = filepath.Join(deployDir, "prometheus", "outbox-rules.test.yml")
	dashboardPath = filepath.Join(deployDir, "grafana", "outbox-dashboard.json")
)

// exportedSeries starts the metrics the way 'outbox relay --metrics-addr'
// does (serveMetrics, on a SQLite table), makes every series appear (a
// batch with each outcome and an outage, a cleanup round that succeeds and
// one that fails), scrapes /metrics and returns each series name it
// serves: a histogram's _bucket, _sum and _count, a counter's and a
// gauge's own name.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	db, err := dbopen.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "outbox.db"), dbopen.TLS{}, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := listenHTTP(ctx, "metrics-addr", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv.serve(log, newReadiness())
	// A store that streams (outbox relay --cdc), for the stream's series.
	m, err := serveMetrics(srv, streamingStore{db.Store, db.Store.(outboxdriver.BacklogReader)}, log)
	if err != nil {
		t.Fatal(err)
	}
	var rep outbox.BatchReport
	for k := range []outbox.OutcomeKind{outbox.OutcomeSent, outbox.OutcomeRetry, outbox.OutcomeDead, outbox.OutcomeRelease} {
		rep.Results = append(rep.Results, outbox.MessageResult{Message: outbox.Message{Topic: "t"},
			Outcome: outbox.Outcome{Kind: outbox.OutcomeKind(k)}})
	}
	rep.Outage, rep.Duration = errors.New("broker down"), time.Millisecond
	m.OnBatch(ctx, rep)
	m.OnCleanup(ctx, outbox.CleanerReport{Sent: 1}, nil)
	m.OnCleanup(ctx, outbox.CleanerReport{}, errors.New("database down"))

	body := clitest.Scrape(t, "http://"+srv.ln.Addr().String()+"/metrics")
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		switch f[3] {
		case "histogram":
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+s] = true
			}
		case "summary":
			names[f[2]+"_sum"], names[f[2]+"_count"], names[f[2]] = true, true, true
		default:
			names[f[2]] = true
		}
	}
	// The series the checks rely on must be there, or the scrape above
	// missed the relay's own and every check would pass on the Go runtime's.
	for _, n := range []string{"outbox_relay_messages_total", "outbox_pending_messages", "outbox_cleanup_rounds_total",
		"outbox_relay_batch_duration_seconds_bucket", "outbox_cleanup_last_success_timestamp_seconds"} {
		if !names[n] {
			t.Fatalf("the metrics server does not serve %s:\n%s", n, body)
		}
	}
	return names
}

// alertRules is the part of a Prometheus rules file the checks read.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert  string            `yaml:"alert"`
			Record string            `yaml:"record"`
			Expr   string            `yaml:"expr"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// grafanaDashboard is the part of a dashboard the checks read.
type grafanaDashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDeployMetricNames checks that every metric name in the alert rules and
// the Grafana dashboard is one the binary serves, so that renaming a series
// fails here rather than silence an alert or blank a panel.
func TestDeployMetricNames(t *testing.T) {
	t.Parallel()
	served := exportedSeries(t)
	exprs := map[string]string{} // where -> expression

	raw, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts++
			}
			if r.Labels["severity"] == "" && r.Alert != "" {
				t.Errorf("%s: alert %s has no severity label", rulesPath, r.Alert)
			}
			exprs[rulesPath+": "+r.Alert+r.Record] = r.Expr
		}
	}
	if alerts < 6 {
		t.Fatalf("%s: %d alerts, want the 6 of docs/alerts.md", rulesPath, alerts)
	}

	raw, err = os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash grafanaDashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardPath, p.Title)
		}
		for i, tg := range p.Targets {
			exprs[dashboardPath+": panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if strings.HasPrefix(v.Definition, "label_values(") {
			// label_values(metric, label): the metric alone.
			metric, _, _ := strings.Cut(strings.TrimPrefix(v.Definition, "label_values("), ",")
			exprs[dashboardPath+": variable "+v.Name] = metric
		}
	}

	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, where := range keys {
		names := promqlMetricNames(exprs[where])
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, exprs[where])
		}
		for _, n := range names {
			if !served[n] {
				t.Errorf("%s: %q is not a series 'outbox relay --metrics-addr' serves", where, n)
			}
		}
	}
}

// TestDeployPrometheusRules runs promtool on the rules file: check rules
// (syntax, templates) and test rules (each alert's unit tests).
func TestDeployPrometheusRules(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (apt-get install prometheus, which .ci/run does): the alert rules were not tested")
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(rulesPath)},
		{"test", "rules", filepath.Base(rulesTestPath)},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(rulesPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// promqlKeywords are PromQL's words that are not metric names: its
// keywords, and its aggregations, which "by (...)" may separate from their
// "(".
var promqlKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "start": true, "end": true,
}

// promqlMetricNames returns the metric names in a PromQL expression: the
// identifiers that are not a function or an aggregation (followed by "("), a
// keyword, a label name (in braces, or in the list after by, without, on,
// ignoring, group_left or group_right), or inside a string or a duration in
// brackets.
func promqlMetricNames(expr string) []string {
	var names []string
	labelList := false // the next "(" opens a list of label names
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{' || c == '[':
			closer := map[byte]byte{'{': '}', '[': ']'}[c]
			j := i + 1
			for j < len(expr) && expr[j] != closer {
				if q := expr[j]; q == '"' || q == '\'' || q == '`' {
					for j++; j < len(expr) && expr[j] != q; j++ {
						if expr[j] == '\\' {
							j++
						}
					}
				}
				j++
			}
			i = j + 1
		case c == '(' && labelList:
			j := strings.IndexByte(expr[i:], ')')
			if j < 0 {
				return names
			}
			i += j + 1
			labelList = false
		case c == '$': // a Grafana variable: $__rate_interval, ${job}
			j := i + 1
			for j < len(expr) && (isIdentByte(expr[j]) || expr[j] == '{' || expr[j] == '}') {
				j++
			}
			i = j
		case isIdentByte(c) && !(c >= '0' && c <= '9'):
			j := i
			for j < len(expr) && (isIdentByte(expr[j]) || expr[j] == ':') {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" ||
				word == "group_left" || word == "group_right":
				labelList = true
			case promqlKeywords[strings.ToLower(word)]:
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				names = append(names, word)
			}
			i = j
		case c >= '0' && c <= '9' || c == '.':
			// a number, with a duration's unit or an exponent
			j := i
			for j < len(expr) && (isIdentByte(expr[j]) || expr[j] == '.') {
				j++
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// TestPromqlMetricNames checks the extraction the deploy checks rely on.
func TestPromqlMetricNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		`max by (job) (outbox_pending_messages) > 0`:                                            "outbox_pending_messages",
		`sum by (job, instance) (increase(outbox_x_total{result="failed", a=~"(b)"}[1h]))`:      "outbox_x_total",
		`(a > 0) unless on (job) (sum by (job) (increase(b[15m])) > 0)`:                         "a b",
		`histogram_quantile(0.99, sum by (le) (rate(h_bucket{job=~"$job"}[$__rate_interval])))`: "h_bucket",
		`time() - max by (instance) (last_ts) > bool 1e3`:                                       "last_ts",
		`x offset 5m / ignoring (stage) group_left (topic) y`:                                   "x y",
	} {
		if got := strings.Join(promqlMetricNames(expr), " "); got != want {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// streamingStore is a store whose change stream runs, 1 MiB and 2s behind.
type streamingStore struct {
	outboxdriver.Store
	outboxdriver.BacklogReader
}

func (streamingStore) StreamLag() (outboxdriver.StreamLag, bool) {
	return outboxdriver.StreamLag{Bytes: 1 << 20, Behind: 2 * time.Second}, true
}
