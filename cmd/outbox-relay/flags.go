package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/relay"

	"github.com/peterbourgon/ff/v3"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/lease"
)

// newFlagSet returns the flag set of `outbox-relay <name>`. The flag
// package itself prints nothing: parse reports a bad flag in one line and
// prints the usage (to stdout) only for -h, -help or --help.
func newFlagSet(name string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("outbox-relay "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { printUsage(fs, stdout) }
	return fs
}

// printUsage lists every flag with its type, default and environment
// variable.
func printUsage(fs *flag.FlagSet, w io.Writer) {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintf(w, "Usage: %s\n", fs.Name())
	} else {
		fmt.Fprintf(w, "Usage: %s [flags]\n", fs.Name())
	}
	if h := commandHelp[strings.TrimPrefix(fs.Name(), "outbox-relay ")]; h != "" {
		fmt.Fprintf(w, "\n%s\n", h)
	}
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags (each also read from the environment variable shown):\n")
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  %s\n    \t%s\n    \t[env %s]", strings.TrimSpace("--"+f.Name+" "+typ), usage, envName(f.Name))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// envName is the environment variable ff reads for flag name (prefix
// OUTBOX, dashes as underscores, upper case): --poll-interval is
// OUTBOX_POLL_INTERVAL.
func envName(name string) string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// origins says where each flag that was set got its value: "--name" for
// the command line, the variable's name (OUTBOX_NAME) for the environment.
type origins map[string]string

// fromCommandLine reports whether flag name was given on the command line.
func (o origins) fromCommandLine(name string) bool { return o[name] == "--"+name }

// parse parses args, then the environment (OUTBOX_<FLAG>) for the flags
// not given on the command line. See parseArgs.
func parse(fs *flag.FlagSet, args []string) error {
	_, err := parseArgs(fs, args)
	return err
}

// parseArgs parses args, then the environment for the flags args did not
// set, and returns where each set flag came from. -h, -help or --help
// print the usage and return flag.ErrHelp. Every other problem is a
// usageError of one line naming the flag (or the variable), the value and
// the expected form, ending in a pointer to --help.
func parseArgs(fs *flag.FlagSet, args []string) (origins, error) {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package would call it on every error
	defer func() { fs.Usage = usage }()
	var failed setFailure
	restore := trackSets(fs, &failed)
	defer restore()
	see := "see " + fs.Name() + " --help"

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			restore()
			usage()
			return nil, flag.ErrHelp
		}
		return nil, usageError{commandLineError(fs, err, &failed, see)}
	}
	if fs.NArg() > 0 {
		return nil, usageError{strayArgument(fs, args, see)}
	}
	from := origins{}
	fs.Visit(func(f *flag.Flag) { from[f.Name] = "--" + f.Name })

	if err := ff.Parse(fs, nil, ff.WithEnvVarPrefix("OUTBOX")); err != nil {
		if failed.flag != nil {
			return nil, usageError{fmt.Errorf("%s: invalid value %q for --%s: %s; %s",
				envName(failed.flag.Name), failed.value, failed.flag.Name, failed.want(), see)}
		}
		return nil, usageError{fmt.Errorf("%v; %s", err, see)}
	}
	fs.Visit(func(f *flag.Flag) {
		if from[f.Name] == "" {
			from[f.Name] = envName(f.Name)
		}
	})
	if err := refuseZeros(fs, from); err != nil {
		return nil, err
	}
	return from, checkTableName(fs, from)
}

// checkTableName refuses a --table that is not a table or schema.table
// name, on every command that has the flag, before anything reaches SQL.
func checkTableName(fs *flag.FlagSet, from origins) error {
	f := fs.Lookup("table")
	if f == nil {
		return nil
	}
	name := f.Value.String()
	parts := strings.Split(name, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		set := from["table"]
		if set == "" {
			set = "--table"
		}
		return usagef("%s: %q is not a table or schema.table name, e.g. outbox or billing.outbox; see %s --help", set, name, fs.Name())
	}
	return nil
}

// setFailure is the first flag value that did not parse.
type setFailure struct {
	flag  *flag.Flag
	kind  string // see kindOf
	value string
	err   error
}

// want describes the form the flag expects.
func (s *setFailure) want() string {
	var w string
	switch s.kind {
	case "duration":
		w = "want a duration with a unit, e.g. 30s"
		if days, ok := strings.CutSuffix(s.value, "d"); ok && days != "" && strings.Trim(days, "0123456789") == "" {
			w += " (units: ms, s, m, h; no d: " + s.value + " is " + daysInHours(days) + ")"
		}
	case "int":
		w = "want an integer"
	case "uint":
		w = "want a non-negative integer"
	case "float":
		w = "want a number"
	case "bool":
		w = "want true or false (also accepted: 1, 0, t, f, T, F, TRUE, FALSE, True, False)"
	default:
		return s.err.Error()
	}
	if s.err != nil && strings.Contains(s.err.Error(), "out of range") {
		w = "out of range, " + w
	}
	return w
}

// kindOf is the flag's value type as the usage shows it: "duration",
// "int", "uint", "float", "string", "bool" or "value".
func kindOf(f *flag.Flag) string {
	if tv, ok := f.Value.(*trackedValue); ok {
		return tv.kind
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "bool"
	}
	probe := *f
	probe.Usage = "" // a `name` in the usage would rename the type
	name, _ := flag.UnquoteUsage(&probe)
	return name
}

// trackedValue records the first value that fails to parse, for an error
// message that names the flag, the value and the expected form; the flag
// package's own ("invalid value ... : parse error") says neither the form
// nor, for environment variables, the variable.
type trackedValue struct {
	flag.Value
	f      *flag.Flag
	kind   string
	failed *setFailure
}

func (v *trackedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && v.failed.flag == nil {
		*v.failed = setFailure{flag: v.f, kind: v.kind, value: s, err: err}
	}
	return err
}

// IsBoolFlag keeps boolean flags usable without a value (--no-notify).
func (v *trackedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// trackSets wraps every flag's value in a trackedValue until restore is
// called.
func trackSets(fs *flag.FlagSet, failed *setFailure) (restore func()) {
	orig := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		orig[f] = f.Value
		f.Value = &trackedValue{Value: f.Value, f: f, kind: kindOf(f), failed: failed}
	})
	return func() {
		for f, v := range orig {
			f.Value = v
		}
	}
}

// commandLineError rewrites the flag package's error for args.
func commandLineError(fs *flag.FlagSet, err error, failed *setFailure, see string) error {
	msg := err.Error()
	if failed.flag != nil {
		return fmt.Errorf("--%s: invalid value %q: %s; %s", failed.flag.Name, failed.value, failed.want(), see)
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag --%s; %s", name, see)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		if f := fs.Lookup(name); f != nil {
			s := setFailure{flag: f, kind: kindOf(f)}
			if s.kind != "string" && s.kind != "value" {
				return fmt.Errorf("--%s: needs a value (%s); %s", name, strings.TrimPrefix(s.want(), "want "), see)
			}
		}
		return fmt.Errorf("--%s: needs a value; %s", name, see)
	}
	return fmt.Errorf("%s; %s", msg, see)
}

// strayArgument explains an argument that is not a flag; after a boolean
// flag it is most likely meant as its value.
func strayArgument(fs *flag.FlagSet, args []string, see string) error {
	arg := fs.Arg(0)
	if i := len(args) - fs.NArg() - 1; i >= 0 && !strings.Contains(args[i], "=") {
		name := strings.TrimLeft(args[i], "-")
		if f := fs.Lookup(name); f != nil && kindOf(f) == "bool" {
			return fmt.Errorf("unexpected argument %q: --%s takes no separate value, write --%s=%s; %s", arg, name, name, arg, see)
		}
	}
	return fmt.Errorf("unexpected argument %q; %s", arg, see)
}

// zeroRefused are the flags whose 0 would silently mean the default.
var zeroRefused = map[string]bool{
	"lease": true, "batch-size": true, "max-batch-bytes": true, "poll-interval": true, "max-attempts": true, "shutdown-timeout": true,
	"retry-min": true, "retry-max": true, "linger-poll": true, "claim-window-poll": true, "busy-claim-interval": true, "metrics-interval": true, "kafka-write-timeout": true,
}

// refuseZeros refuses 0 where it would silently mean the default, naming
// where the 0 came from.
func refuseZeros(fs *flag.FlagSet, from origins) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if v := f.Value.String(); err != nil || (v != "0" && v != "0s") {
			return
		}
		src := ""
		if !from.fromCommandLine(f.Name) {
			src = " (set by " + from[f.Name] + ")"
		}
		switch {
		case f.Name == "linger" || f.Name == "claim-window":
			err = usagef("--%s: 0 is refused%s: a negative value, e.g. --claim-window=-1ms, turns the claim window off; omit it (and %s) for the default, %s",
				f.Name, src, envName(f.Name), relay.DefaultClaimWindow)
		case f.Name == "kafka-write-timeout":
			err = usagef("--kafka-write-timeout: must be positive%s (omit it, and %s, for the default: %s, or what fits in half of --lease)", src, envName(f.Name), kafka.DefaultWriteTimeout)
		case zeroRefused[f.Name]:
			err = usagef("--%s: must be positive%s (omit it, and %s, for the default, %s)", f.Name, src, envName(f.Name), f.DefValue)
		}
	})
	return err
}

// debeziumTopicTemplate is Debezium's Outbox Event Router's default route.
const debeziumTopicTemplate = "outbox.event.${aggregatetype}"

// tableFlags are the flags that say which table holds the events, in which
// columns, and where the relay routes them: --table, --debezium,
// --column-*, and --topic and --topic-template. Every command that reads
// the outbox table registers them through register, so each answers for
// the table the relay reads, configured the same way.
type tableFlags struct {
	table         string
	debezium      bool
	cols          lease.Columns // --column-*, before --debezium's defaults
	topic         string        // registered with a topic usage only
	topicTemplate string
}

// registerTable registers --table only.
func (t *tableFlags) registerTable(fs *flag.FlagSet) {
	fs.StringVar(&t.table, "table", outbox.DefaultTable, "outbox table, optionally schema-qualified (schema.table)")
}

// register registers --table, --debezium and --column-*, and, when
// topicUsage is not empty, --topic (with that usage) and --topic-template.
func (t *tableFlags) register(fs *flag.FlagSet, topicUsage string) {
	t.registerTable(fs)
	debezium := "the table is a Debezium outbox table: columns id, aggregatetype, aggregateid, type, payload (sets the --column-* defaults)"
	if topicUsage != "" {
		debezium = "the table is a Debezium outbox table: columns id, aggregatetype, aggregateid, type, payload (sets the --column-* defaults, and --topic-template's: " + debeziumTopicTemplate + ")"
	}
	fs.BoolVar(&t.debezium, "debezium", false, debezium)
	fs.StringVar(&t.cols.ID, "column-id", "", "event ID column, uuid (default id)")
	fs.StringVar(&t.cols.AggregateID, "column-aggregate-id", "", "aggregate ID column, the Kafka key (default aggregate_id; Debezium aggregateid)")
	fs.StringVar(&t.cols.EventType, "column-event-type", "", "event type column (default event_type; Debezium type)")
	fs.StringVar(&t.cols.Payload, "column-payload", "", "payload column, jsonb or text (default payload)")
	fs.StringVar(&t.cols.AggregateType, "column-aggregate-type", "", "column that --topic-template routes by (Debezium aggregatetype)")
	if topicUsage != "" {
		fs.StringVar(&t.topic, "topic", "", topicUsage)
		fs.StringVar(&t.topicTemplate, "topic-template", "", "route events whose topic column is NULL by their --column-aggregate-type value, e.g. "+
			debeziumTopicTemplate+" (Debezium's default routing, implied by --debezium)")
	}
}

// columns returns the column mapping with --debezium's defaults under the
// explicit --column-* flags.
func (t *tableFlags) columns() lease.Columns {
	cols := t.cols
	if t.debezium {
		d := lease.DebeziumColumns
		for _, p := range []struct {
			dst *string
			def string
		}{
			{&cols.ID, d.ID}, {&cols.AggregateID, d.AggregateID}, {&cols.EventType, d.EventType},
			{&cols.Payload, d.Payload}, {&cols.AggregateType, d.AggregateType},
		} {
			if *p.dst == "" {
				*p.dst = p.def
			}
		}
	}
	return cols
}

// flags returns the table flags as given, to repeat them: "--table
// outboxevent --debezium".
func (t *tableFlags) flags() string {
	s := "--table " + shellArg(t.table)
	if t.debezium {
		s += " --debezium"
	}
	for _, c := range []struct{ name, value string }{
		{"column-id", t.cols.ID}, {"column-aggregate-id", t.cols.AggregateID}, {"column-event-type", t.cols.EventType},
		{"column-payload", t.cols.Payload}, {"column-aggregate-type", t.cols.AggregateType},
	} {
		if c.value != "" {
			s += " --" + c.name + " " + shellArg(c.value)
		}
	}
	return s
}

// commandArgs returns the flags another command needs to read the same
// table, followed by a space: "" for the default table and columns.
func (t *tableFlags) commandArgs() string {
	if f := t.flags(); f != "--table "+outbox.DefaultTable {
		return f + " "
	}
	return ""
}

// template returns --topic-template, or Debezium's route with --debezium.
func (t *tableFlags) template() string {
	if t.topicTemplate == "" && t.debezium {
		return debeziumTopicTemplate
	}
	return t.topicTemplate
}

// validateRouting checks --topic and --topic-template as the relay does.
func (t *tableFlags) validateRouting() error {
	if t.topic != "" {
		if err := outbox.ValidateTopic(t.topic); err != nil {
			return usagef("--topic: %v", err)
		}
	}
	if t.topicTemplate != "" && !strings.Contains(t.topicTemplate, "${") {
		return usagef("--topic-template: %q has no ${aggregatetype} placeholder", t.topicTemplate)
	}
	return nil
}

// Topic sources of route, as inspect --json reports them.
const (
	topicFromColumn   = "column"
	topicFromTemplate = "topic-template"
	topicFromFlag     = "topic"
)

// route returns the topic the relay sends an event to, as relay.Relay
// routes it: the row's topic column, else --topic-template expanded with
// the row's aggregate type, else --topic; source says which ("" with the
// topic, when none applies).
func (t *tableFlags) route(topicColumn, aggregateType *string) (topic, source string) {
	if topicColumn != nil && *topicColumn != "" {
		return *topicColumn, topicFromColumn
	}
	if tmpl := t.template(); tmpl != "" && aggregateType != nil && *aggregateType != "" {
		return strings.NewReplacer("${aggregatetype}", *aggregateType, "${routedByValue}", *aggregateType).Replace(tmpl), topicFromTemplate
	}
	if t.topic != "" {
		return t.topic, topicFromFlag
	}
	return "", ""
}

// daysInHours writes a whole number of days (digits) as hours, for a
// duration flag given in days: "7" is "168h".
func daysInHours(days string) string {
	n, err := strconv.Atoi(days)
	if err != nil || n > 1<<20 {
		return "not a duration"
	}
	return strconv.Itoa(n*24) + "h"
}
