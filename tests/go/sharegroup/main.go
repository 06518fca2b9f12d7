// franz-go's share consumer (KIP-932) against a broker that serves share groups, for
// tests/differential/test_share_clients.py. It reads every record of a one-partition
// topic in a share group whose share.auto.offset.reset the test set to earliest,
// RELEASEs offset 0 (which comes back with delivery count 2), REJECTs offset 1 (which
// never comes back) and ACCEPTs the rest, then prints
//
//	STEP deliveries <offset>:<delivery count>,... (in offset order)
//	STEP acks <errors reported to the ack callback>
//	DONE
//
// Arguments: bootstrap servers, topic, group, number of records.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type delivery struct {
	offset int64
	count  int32
}

func format(ds []delivery) string {
	sort.Slice(ds, func(i, j int) bool {
		return ds[i].offset < ds[j].offset || ds[i].offset == ds[j].offset && ds[i].count < ds[j].count
	})
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%d:%d", d.offset, d.count)
	}
	return strings.Join(parts, ",")
}

// poll acknowledges each record as status says and flushes the acks after each poll,
// until done says so or the context ends; it returns every delivery.
func poll(ctx context.Context, cl *kgo.Client, status func(delivery) kgo.AckStatus,
	done func([]delivery) bool) []delivery {
	var got []delivery
	for !done(got) && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) {
			d := delivery{r.Offset, r.DeliveryCount()}
			got = append(got, d)
			r.Ack(status(d))
		})
		if err := cl.FlushAcks(ctx); err != nil && ctx.Err() == nil {
			fmt.Println("STEP flush", err)
		}
	}
	return got
}

func main() {
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[3]
	n, err := strconv.Atoi(os.Args[4])
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var ackErrors []string
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ShareGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ShareAckCallback(func(_ *kgo.Client, results kgo.ShareAckResults) {
			if err := results.Error(); err != nil {
				mu.Lock()
				ackErrors = append(ackErrors, err.Error())
				mu.Unlock()
			}
		}),
	)
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	// Offset 0 RELEASEd once, offset 1 REJECTed, everything else ACCEPTed.
	status := func(d delivery) kgo.AckStatus {
		switch {
		case d.offset == 0 && d.count == 1:
			return kgo.AckRelease
		case d.offset == 1:
			return kgo.AckReject
		}
		return kgo.AckAccept
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	got := poll(ctx, cl, status, func(ds []delivery) bool { return len(ds) >= n+1 })
	cancel()
	// Nothing more comes (offset 1 was rejected, the rest accepted).
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	got = append(got, poll(ctx, cl, status, func([]delivery) bool { return false })...)
	cancel()
	fmt.Println("STEP deliveries", format(got))
	mu.Lock()
	fmt.Println("STEP acks", strings.Join(ackErrors, "; "))
	mu.Unlock()
	fmt.Println("DONE")
}
