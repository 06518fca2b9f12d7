// A share-group worker (KIP-932) with franz-go's share consumer (kgo.ShareGroup), for
// `txbroker chaos --share` (docs/testing-your-pipeline.md, "Share-group worker pools").
// Build it with `make franz-go` (into build/go/chaosshare; Go 1.26), then:
//
//	txbroker chaos --share --input jobs --instances 3 --duration 60 -- build/go/chaosshare
//
// The franz-go twin of testing/chaos/recipes/confluent_share_worker.py and
// tests/jvm/chaos/ChaosShareWorker.java: a poll's records ACCEPTed after their work,
// FlushAcks after each poll; every delivery (with its delivery count), ACCEPT sent and
// answer written as a JSON line into TXBROKER_HISTORY for the chaos checker.
//
// franz-go reports acknowledgements only per partition, through ShareAckCallback, and
// FlushAcks returns once every queued acknowledgement has been answered and its
// callback has run. So the results the callback gets during one poll's flush are that
// poll's answers. An answer is "failed" only when it is a Kafka error code (*kerr.Error,
// the broker's, or the client's own for acks it dropped unsent as stale) and no
// ShareFetch/ShareAcknowledge lost its answer meanwhile: franz-go retries a request whose
// connection broke, and the broker's refusal of the retry says nothing of the first
// attempt. Transport errors, timeouts, a partition missing from the answer, mixed
// answers for one partition: "unknown". A flush that times out leaves acknowledgements
// in flight whose answers would land in the next poll's window: the worker writes them
// unknown and exits (crash-only; the supervisor starts it again).
//
// Flags: -reject-every N (broken on purpose: REJECT every Nth record; the checker
// reports them lost), -work-ms (the work per record, default 20).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	flushTimeout = 10 * time.Second
	maxRecords   = 50
)

const (
	shareFetchKey       = 78
	shareAcknowledgeKey = 79
)

// history writes JSON lines, one write(2) each on an O_APPEND file: a SIGKILL tears
// at most the line being written (the checker skips a torn last line).
type history struct {
	f      *os.File
	worker string
	seq    int
}

func newHistory(folder, instance string) (*history, error) {
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return nil, err
	}
	worker := instance + "-" + strconv.Itoa(os.Getpid())
	path := filepath.Join(folder, "worker-"+worker+".jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &history{f: f, worker: worker}, nil
}

func (h *history) write(line map[string]any) {
	line["w"] = h.worker
	line["ts"] = float64(time.Now().UnixNano()) / 1e9
	b, err := json.Marshal(line)
	if err != nil {
		panic(err)
	}
	if _, err := h.f.Write(append(b, '\n')); err != nil {
		panic(err)
	}
}

func (h *history) delivered(r *kgo.Record) int {
	h.seq++
	var key any
	if r.Key != nil {
		key = string(r.Key)
	}
	h.write(map[string]any{"d": []any{r.Topic, r.Partition, r.Offset, key, r.DeliveryCount()},
		"s": h.seq})
	return h.seq
}

// answered writes "done" (error nil: confirmed; else failed) or "unknown" lines.
func (h *history) answered(kind string, seqs []int, why error) {
	var e any
	if why != nil {
		e = why.Error()
	}
	h.write(map[string]any{kind: seqs, "error": e})
}

type partition struct {
	topic string
	p     int32
}

// answers gathers the callback's results during one flush.
type answers struct {
	mu   sync.Mutex
	errs map[partition][]error
}

func (a *answers) add(results kgo.ShareAckResults) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range results {
		tp := partition{r.Topic, r.Partition}
		a.errs[tp] = append(a.errs[tp], r.Err)
	}
}

func (a *answers) take() map[partition][]error {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := a.errs
	a.errs = map[partition][]error{}
	return got
}

// outcome of one partition's ACCEPTs: the line kind and its error.
func outcome(errs []error, answerLost bool) (string, error) {
	if len(errs) == 0 {
		return "unknown", errors.New("no result for the partition")
	}
	first := errs[0]
	for _, e := range errs[1:] {
		if (e == nil) != (first == nil) || e != nil && e.Error() != first.Error() {
			// Split over requests answered differently: which records got which is not said.
			return "unknown", fmt.Errorf("mixed results for the partition: %v", errs)
		}
	}
	if first == nil {
		return "done", nil
	}
	var ke *kerr.Error
	if !errors.As(first, &ke) || answerLost ||
		ke.Code == kerr.RequestTimedOut.Code || ke.Code == kerr.NetworkException.Code {
		return "unknown", first
	}
	return "done", first
}

func env(name, otherwise string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return otherwise
}

func main() {
	rejectEvery := flag.Int("reject-every", 0, "broken on purpose: REJECT every Nth record polled")
	workMs := flag.Float64("work-ms", 20, "how long the work on one record takes (ms)")
	flag.Parse()

	h, err := newHistory(env("TXBROKER_HISTORY", "share-history"), env("TXBROKER_INSTANCE", "0"))
	if err != nil {
		panic(err)
	}
	got := &answers{errs: map[partition][]error{}}
	var lostAnswers atomic.Int64
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(os.Getenv("TXBROKER_BOOTSTRAP")),
		kgo.ShareGroup(env("TXBROKER_GROUP", "chaos-workers")),
		kgo.ConsumeTopics(env("TXBROKER_INPUT", "jobs")),
		kgo.ShareAckCallback(func(_ *kgo.Client, results kgo.ShareAckResults) { got.add(results) }),
		kgo.WithHooks(lostAnswerHook{&lostAnswers}),
		// A poll's work (maxRecords x the work per record) well inside the 10 s lock,
		// records fetched when polled (no prefetch holding locks meanwhile): a poll's
		// ACCEPTs then rarely outlive its locks or its share session (a broker restart
		// makes franz-go drop acks of records fetched in the old session).
		kgo.ShareMaxRecords(maxRecords), kgo.ShareMaxRecordsStrict(),
		// A lost answer (a broker crash or hang, a dropped response) is given up on after 5 s.
		kgo.RequestTimeoutOverhead(5*time.Second),
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	polled := 0
	for {
		fetches := cl.PollFetches(ctx)
		lostBefore := lostAnswers.Load()
		var all []int
		var done []*kgo.Record
		byPartition := map[partition][]int{}
		fetches.EachRecord(func(r *kgo.Record) {
			seq := h.delivered(r)
			polled++
			if *rejectEvery > 0 && polled%*rejectEvery == 0 {
				r.Ack(kgo.AckReject) // never delivered again
				return
			}
			time.Sleep(time.Duration(*workMs * float64(time.Millisecond))) // the work, before the ACCEPT
			done = append(done, r)
			tp := partition{r.Topic, r.Partition}
			byPartition[tp] = append(byPartition[tp], seq)
			all = append(all, seq)
		})
		if len(all) == 0 {
			continue // (only REJECTs: flushed with the next poll's)
		}
		// "sent" before the first Ack: franz-go may send an Ack at once (piggybacked on a
		// ShareFetch), and a kill before the line would hide an applied ACCEPT.
		h.answered("sent", all, nil)
		cl.MarkAcks(kgo.AckAccept, done...)
		flushCtx, cancel := context.WithTimeout(ctx, flushTimeout)
		err := cl.FlushAcks(flushCtx)
		cancel()
		if err != nil {
			h.answered("unknown", all, err)
			os.Exit(1)
		}
		results := got.take()
		answerLost := lostAnswers.Load() != lostBefore
		for tp, seqs := range byPartition {
			kind, why := outcome(results[tp], answerLost)
			h.answered(kind, seqs, why)
		}
	}
}

// lostAnswerHook counts ShareFetch/ShareAcknowledge requests whose answer never came
// (a write or read error): acknowledgements in them may have been applied.
type lostAnswerHook struct{ n *atomic.Int64 }

func (l lostAnswerHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if (key == shareFetchKey || key == shareAcknowledgeKey) && e2e.Err() != nil {
		l.n.Add(1)
	}
}
