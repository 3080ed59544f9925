package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// containerLog keeps one container's output as the kubelet's log files do
// (the CRI format: one record per line, with the time it was read, its
// stream, and whether the line goes on in the next record), for the
// container's current run and the run before it (what `previous` reads).
// Each run keeps at most logBytesPerRun, dropping its oldest lines first, as
// the kubelet rotates its files. It lives in memory and goes with its Pod's
// worker, that is with the Pod.
type containerLog struct {
	mu       sync.Mutex
	current  *logRun
	previous *logRun
}

// logBytesPerRun bounds what one run of a container keeps.
const logBytesPerRun = 1 << 20

// logLineMax is the longest record; a longer line is split into partial
// records, as container runtimes split theirs at 16 KiB.
const logLineMax = 16 << 10

// logRun is one run's output.
type logRun struct {
	log     *containerLog
	records []logRecord
	first   int64 // the sequence number of records[0]
	size    int
	open    int           // output streams not yet at end of file
	changed chan struct{} // closed (and replaced) at every append and when the run ends
}

type logRecord struct {
	at      time.Time
	stderr  bool
	partial bool // the line goes on in the next record (the CRI's "P" tag), or ends without a newline
	data    []byte
}

// begin starts a new run, which reads the process's stdout and stderr until
// both are at end of file; the current run becomes the previous one.
func (l *containerLog) begin(stdout, stderr io.ReadCloser) *logRun {
	run := &logRun{log: l, open: 2, changed: make(chan struct{})}
	l.mu.Lock()
	l.previous, l.current = l.current, run
	l.mu.Unlock()
	go run.pump(stdout, false)
	go run.pump(stderr, true)
	return run
}

func (run *logRun) pump(r io.ReadCloser, stderr bool) {
	defer r.Close()
	reader := bufio.NewReaderSize(r, logLineMax)
	for {
		line, err := reader.ReadSlice('\n')
		if len(line) > 0 {
			partial := line[len(line)-1] != '\n'
			if !partial {
				line = line[:len(line)-1]
			}
			run.append(logRecord{at: time.Now(), stderr: stderr, partial: partial, data: append([]byte(nil), line...)})
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	run.log.mu.Lock()
	run.open--
	run.notifyLocked()
	run.log.mu.Unlock()
}

// recordOverhead stands for a record's time, stream and tag in its size.
const recordOverhead = 40

func (run *logRun) append(rec logRecord) {
	run.log.mu.Lock()
	defer run.log.mu.Unlock()
	run.records = append(run.records, rec)
	run.size += len(rec.data) + recordOverhead
	for run.size > logBytesPerRun && len(run.records) > 1 {
		run.size -= len(run.records[0].data) + recordOverhead
		run.records[0] = logRecord{}
		run.records = run.records[1:]
		run.first++
	}
	run.notifyLocked()
}

func (run *logRun) notifyLocked() {
	close(run.changed)
	run.changed = make(chan struct{})
}

// logOptions are the kubelet's `/containerLogs` query parameters (the
// fields of v1.PodLogOptions the apiserver passes on).
type logOptions struct {
	follow, previous, timestamps bool
	since                        time.Time // zero: from the start
	tailLines                    int64     // -1: all
	limitBytes                   int64     // -1: no limit
	stream                       string    // All, Stdout or Stderr
}

// parseLogOptions reads the query the apiserver sends (pod.LogLocation in
// k8s.io/kubernetes/pkg/registry/core/pod/strategy.go).
func parseLogOptions(q url.Values, now time.Time) (logOptions, error) {
	opts := logOptions{tailLines: -1, limitBytes: -1, stream: "All"}
	flag := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("invalid %s %q", name, v)
		}
		return b, nil
	}
	number := func(name string, min int64) (int64, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return 0, false, fmt.Errorf("invalid %s %q", name, v)
		}
		return n, true, nil
	}
	var err error
	if opts.follow, err = flag("follow"); err != nil {
		return opts, err
	}
	if opts.previous, err = flag("previous"); err != nil {
		return opts, err
	}
	if opts.timestamps, err = flag("timestamps"); err != nil {
		return opts, err
	}
	if n, ok, err := number("sinceSeconds", 1); err != nil {
		return opts, err
	} else if ok {
		opts.since = now.Add(-time.Duration(n) * time.Second)
	}
	if v := q.Get("sinceTime"); v != "" {
		if opts.since, err = time.Parse(time.RFC3339, v); err != nil {
			return opts, fmt.Errorf("invalid sinceTime %q", v)
		}
		if q.Get("sinceSeconds") != "" {
			return opts, errors.New("at most one of sinceTime or sinceSeconds may be specified")
		}
	}
	// "tail" is the kubelet's older name for tailLines; "all" means no limit.
	if tail := q.Get("tail"); tail != "" && tail != "all" && q.Get("tailLines") == "" {
		q = cloneValues(q)
		q.Set("tailLines", tail)
	}
	if n, ok, err := number("tailLines", 0); err != nil {
		return opts, err
	} else if ok {
		opts.tailLines = n
	}
	if n, ok, err := number("limitBytes", 1); err != nil {
		return opts, err
	} else if ok {
		opts.limitBytes = n
	}
	switch s := q.Get("stream"); s {
	case "", "All":
	case "Stdout", "Stderr":
		opts.stream = s
		if opts.tailLines >= 0 {
			return opts, errors.New("tailLines cannot be used with a stream other than All")
		}
	default:
		return opts, fmt.Errorf("invalid stream type %q", s)
	}
	return opts, nil
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// errNoPrevious is what `previous` answers for a container that has not
// restarted.
var errNoPrevious = errors.New("no previous terminated container")

// write copies the chosen run's records to w as the kubelet does
// (k8s.io/cri-client/pkg/logs ReadLogs): tailLines picks the last lines
// first, lines older than since are skipped, each is prefixed with its
// RFC 3339 time when timestamps is set, and the output stops at limitBytes
// (inside a line if need be). With follow it then waits for more until the
// run ends or ctx is done.
func (l *containerLog) write(ctx context.Context, w io.Writer, opts logOptions) error {
	l.mu.Lock()
	run := l.current
	if opts.previous {
		run = l.previous
	}
	l.mu.Unlock()
	if run == nil {
		if opts.previous {
			return errNoPrevious
		}
		return errors.New("the container has not started")
	}
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	remaining := opts.limitBytes
	next := int64(-1) // the next record's sequence number; -1 until the tail is found
	for {
		l.mu.Lock()
		records, first, changed, ended := run.records, run.first, run.changed, run.open == 0
		l.mu.Unlock()
		start := 0
		switch {
		case next < 0 && opts.tailLines >= 0:
			start = max(len(records)-int(min(opts.tailLines, int64(len(records)))), 0)
		case next >= first:
			start = int(min(next-first, int64(len(records))))
		}
		for _, rec := range records[start:] {
			if rec.at.Before(opts.since) || (opts.stream == "Stdout" && rec.stderr) || (opts.stream == "Stderr" && !rec.stderr) {
				continue
			}
			line := make([]byte, 0, len(rec.data)+40)
			if opts.timestamps {
				line = append(rec.at.UTC().AppendFormat(line, time.RFC3339Nano), ' ')
			}
			line = append(line, rec.data...)
			if !rec.partial {
				line = append(line, '\n')
			}
			if remaining >= 0 && int64(len(line)) >= remaining {
				_, err := w.Write(line[:remaining])
				flush()
				return err
			}
			if _, err := w.Write(line); err != nil {
				return err
			}
			if remaining >= 0 {
				remaining -= int64(len(line))
			}
		}
		next = first + int64(len(records))
		flush()
		if !opts.follow || ended {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}
