package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var logT0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// fixedLog is a container log whose current run holds these records and has ended.
func fixedLog(records ...logRecord) *containerLog {
	l := &containerLog{}
	l.current = &logRun{log: l, records: records, changed: make(chan struct{})}
	return l
}

func rec(second int, stream string, text string) logRecord {
	return logRecord{at: logT0.Add(time.Duration(second) * time.Second), stderr: stream == "err", data: []byte(text)}
}

func read(t *testing.T, l *containerLog, query string) string {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := parseLogOptions(q, logT0.Add(10*time.Second))
	if err != nil {
		t.Fatalf("parse %q: %v", query, err)
	}
	var out bytes.Buffer
	if err := l.write(context.Background(), &out, opts); err != nil {
		t.Fatalf("read %q: %v", query, err)
	}
	return out.String()
}

func TestContainerLogAnswersTheKubeletsQueryParameters(t *testing.T) {
	partial := rec(4, "out", "long ")
	partial.partial = true
	l := fixedLog(rec(1, "out", "one"), rec(2, "err", "two"), rec(3, "out", "three"), partial, rec(4, "out", "line"))
	cases := []struct{ query, want string }{
		{"", "one\ntwo\nthree\nlong line\n"},
		{"timestamps=true&tailLines=2", "2026-12-02T10:00:04Z long 2026-12-02T10:00:04Z line\n"},
		{"tailLines=0", ""},
		{"tailLines=10", "one\ntwo\nthree\nlong line\n"},
		// sinceTime keeps lines at or after it (RFC 3339, whole seconds).
		{"sinceTime=2026-12-02T10:00:02Z", "two\nthree\nlong line\n"},
		// sinceSeconds counts back from now (10:00:10 here).
		{"sinceSeconds=7", "three\nlong line\n"},
		{"limitBytes=6", "one\ntw"},
		{"limitBytes=4", "one\n"},
		{"stream=Stderr", "two\n"},
		{"stream=Stdout", "one\nthree\nlong line\n"},
		{"tail=1", "line\n"},
		{"tail=all", "one\ntwo\nthree\nlong line\n"},
	}
	for _, c := range cases {
		if got := read(t, l, c.query); got != c.want {
			t.Errorf("%q: got %q, want %q", c.query, got, c.want)
		}
	}
}

func TestParseLogOptionsRefusesWhatTheKubeletRefuses(t *testing.T) {
	for _, query := range []string{
		"follow=maybe", "tailLines=-1", "limitBytes=0", "sinceSeconds=0", "sinceTime=yesterday",
		"sinceTime=2026-12-02T10:00:02Z&sinceSeconds=5", "stream=Both", "stream=Stdout&tailLines=3",
	} {
		q, _ := url.ParseQuery(query)
		if _, err := parseLogOptions(q, logT0); err == nil {
			t.Errorf("%q: accepted", query)
		}
	}
}

// pipes returns the read ends for a run and the write ends the "process" writes to.
func pipes(t *testing.T) (stdout, stderr, stdoutW, stderrW *os.File) {
	t.Helper()
	var err error
	if stdout, stdoutW, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	if stderr, stderrW, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = stdoutW.Close(), stderrW.Close() })
	return
}

// waitEnded waits until both of a run's streams are at end of file.
func waitEnded(t *testing.T, run *logRun) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		run.log.mu.Lock()
		ended, changed := run.open == 0, run.changed
		run.log.mu.Unlock()
		if ended {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the run's output did not end within 5 s")
		}
	}
}

func TestContainerLogKeepsEachRunAndThePreviousOne(t *testing.T) {
	l := &containerLog{}
	if _, err := l.writeAll(logOptions{previous: true, tailLines: -1, limitBytes: -1}); !errors.Is(err, errNoPrevious) {
		t.Fatalf("previous before any run: got %v, want errNoPrevious", err)
	}
	for i, text := range []string{"first run\n", "second run\n"} {
		stdout, stderr, stdoutW, stderrW := pipes(t)
		run := l.begin(stdout, stderr)
		before := time.Now()
		_, _ = io.WriteString(stdoutW, text)
		_, _ = io.WriteString(stderrW, "no newline at the end")
		_, _ = stdoutW.Close(), stderrW.Close()
		waitEnded(t, run)
		got := read(t, l, "")
		if !strings.Contains(got, text) || !strings.Contains(got, "no newline at the end") || strings.HasSuffix(got, "end\n") {
			t.Fatalf("run %d: got %q", i, got)
		}
		if at := run.records[0].at; at.Before(before) || time.Since(at) > 5*time.Second {
			t.Fatalf("run %d: a record's time %v is not when it was read", i, at)
		}
	}
	if got := read(t, l, "previous=true&stream=Stdout"); got != "first run\n" {
		t.Fatalf("previous: got %q", got)
	}
}

func TestContainerLogSplitsLongLinesAndDropsTheOldestBeyondItsBound(t *testing.T) {
	l := &containerLog{}
	stdout, stderr, stdoutW, stderrW := pipes(t)
	run := l.begin(stdout, stderr)
	_ = stderrW.Close()
	long := strings.Repeat("x", logLineMax*2+10)
	line := strings.Repeat("y", 999) + "\n"
	go func() {
		_, _ = io.WriteString(stdoutW, long+"\n")
		for i := 0; i < 3*logBytesPerRun/len(line); i++ {
			_, _ = io.WriteString(stdoutW, line)
		}
		_, _ = io.WriteString(stdoutW, "last\n")
		_ = stdoutW.Close()
	}()
	waitEnded(t, run)
	if run.size > logBytesPerRun {
		t.Fatalf("the run keeps %d bytes, more than its bound of %d", run.size, logBytesPerRun)
	}
	if run.first == 0 {
		t.Fatal("no record was dropped")
	}
	got := read(t, l, "tailLines=2")
	if got != line+"last\n" {
		t.Fatalf("tail: got %q", got)
	}

	l = &containerLog{}
	stdout, stderr, stdoutW, stderrW = pipes(t)
	run = l.begin(stdout, stderr)
	_, _ = io.WriteString(stdoutW, long+"\nshort\n")
	_, _ = stdoutW.Close(), stderrW.Close()
	waitEnded(t, run)
	if len(run.records) != 4 || !run.records[0].partial || run.records[2].partial {
		t.Fatalf("want a long line as 3 records (2 partial), then one: got %d records", len(run.records))
	}
	if got := read(t, l, ""); got != long+"\nshort\n" {
		t.Fatalf("the long line does not read back whole (%d bytes)", len(got))
	}
}

// syncBuffer is a buffer a follower writes to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestContainerLogFollowsARunUntilItsOutputEnds(t *testing.T) {
	l := &containerLog{}
	stdout, stderr, stdoutW, stderrW := pipes(t)
	l.begin(stdout, stderr)
	_, _ = io.WriteString(stdoutW, "before\n")
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- l.write(context.Background(), out, logOptions{follow: true, tailLines: -1, limitBytes: -1, stream: "All"})
	}()
	waitFor(t, "the first line", func() bool { return out.String() == "before\n" })
	_, _ = io.WriteString(stderrW, "after\n")
	waitFor(t, "a line written while following", func() bool { return out.String() == "before\nafter\n" })
	select {
	case err := <-done:
		t.Fatalf("follow ended while the output was open: %v", err)
	default:
	}
	_, _ = stdoutW.Close(), stderrW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end within 5 s of the output ending")
	}

	// A follower whose client goes away stops.
	l = &containerLog{}
	stdout, stderr, _, _ = pipes(t)
	l.begin(stdout, stderr)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- l.write(ctx, io.Discard, logOptions{follow: true, tailLines: -1, limitBytes: -1, stream: "All"})
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end within 5 s of its context")
	}
}

// writeAll reads with opts into a string.
func (l *containerLog) writeAll(opts logOptions) (string, error) {
	var out bytes.Buffer
	err := l.write(context.Background(), &out, opts)
	return out.String(), err
}
