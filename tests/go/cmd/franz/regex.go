package main

// The regex scenario: a KIP-848 group subscribed by regular expression. kgo with
// ConsumeRegex and ServerSideBalancer sends SubscribedTopicRegex, so the coordinator
// resolves the pattern against its topics and assigns what matches. Two topics match at
// the start; both members consume and commit their halves; then a third matching topic
// is created while the group runs and must be resolved and assigned without any client
// change of subscription.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kgc/tests/go/internal/report"
)

func regexScenario(ctx context.Context, bootstrap, prefix, group string, adm *kadm.Client) report.Summary {
	summary := report.Summary{"client": "franz-go", "scenario": "consumer-regex"}
	topics := []string{prefix + "-a", prefix + "-b"}
	created, err := adm.CreateTopics(ctx, 2, 1, nil, topics...)
	if err != nil || created.Error() != nil {
		report.Fatalf("CreateTopics: %v %v", err, created.Error())
	}

	report.WaitFor("both topics in metadata", 20*time.Second, func() (bool, string) {
		td, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return false, err.Error()
		}
		return len(td) == 2 && td.Error() == nil, fmt.Sprint(td.Names())
	})

	type tp struct {
		t string
		p int32
	}
	var mu sync.Mutex
	owned := []map[tp]bool{{}, {}}
	seen := map[string]int{} // topic/partition/offset -> times read
	var clients []*kgo.Client
	for i, name := range []string{"a", "b"} {
		update := func(m map[string][]int32, add bool) {
			mu.Lock()
			defer mu.Unlock()
			for t, ps := range m {
				for _, p := range ps {
					if add {
						owned[i][tp{t, p}] = true
					} else {
						delete(owned[i], tp{t, p})
					}
				}
			}
		}
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(bootstrap),
			kgo.ClientID("kgc-go-regex-"+name),
			kgo.ConsumerGroup(group),
			kgo.ConsumeRegex(),
			kgo.ConsumeTopics("^"+prefix+"-.*"),
			kgo.Balancers(kgo.RangeBalancer()),
			kgo.ServerSideBalancer(),
			kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(500*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { update(m, true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { update(m, false) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { update(m, false) }),
		)
		if err != nil {
			report.Fatalf("member %s: %v", name, err)
		}
		clients = append(clients, cl)
	}
	var polling sync.WaitGroup
	var errs []string
	for _, cl := range clients {
		polling.Add(1)
		go func(cl *kgo.Client) {
			defer polling.Done()
			for {
				fs := cl.PollFetches(ctx)
				if fs.IsClientClosed() || ctx.Err() != nil {
					return
				}
				mu.Lock()
				fs.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Sprintf("fetch %s[%d]: %v", t, p, err)) })
				fs.EachRecord(func(r *kgo.Record) { seen[fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)]++ })
				mu.Unlock()
				if fs.NumRecords() > 0 {
					if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, "commit: "+err.Error())
						mu.Unlock()
					}
				}
			}
		}(cl)
	}

	// owners describes the assignment by topic suffix: sorted "a0 a1 b0 ..." per member.
	owners := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, o := range owned {
			var names []string
			for k := range o {
				names = append(names, fmt.Sprintf("%s%d", strings.TrimPrefix(k.t, prefix+"-"), k.p))
			}
			sort.Strings(names)
			out = append(out, strings.Join(names, " "))
		}
		sort.Strings(out)
		return out
	}
	assignedCount := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(owned[0]), len(owned[1])
	}
	report.WaitFor("both matching topics assigned, two partitions a member", 60*time.Second, func() (bool, string) {
		a, b := assignedCount()
		return a == 2 && b == 2, fmt.Sprint(owners())
	})
	summary["assignment"] = owners()

	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		report.Fatalf("producer: %v", err)
	}
	defer producer.Close()
	produce := func(topic string) {
		var batch []*kgo.Record
		for i := 0; i < 20; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(fmt.Sprint(i))})
		}
		if err := producer.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			report.Fatalf("ProduceSync %s: %v", topic, err)
		}
	}
	committedAll := func(what string, want map[string]int64) {
		report.WaitFor(what, 30*time.Second, func() (bool, string) {
			got, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				return false, err.Error()
			}
			have := map[string]int64{}
			got.Each(func(o kadm.OffsetResponse) {
				have[fmt.Sprintf("%s%d", strings.TrimPrefix(o.Topic, prefix+"-"), o.Partition)] = o.At
			})
			return fmt.Sprint(have) == fmt.Sprint(want), fmt.Sprint(have)
		})
	}
	for _, t := range topics {
		produce(t)
	}
	committedAll("both topics consumed and committed", map[string]int64{"a0": 10, "a1": 10, "b0": 10, "b1": 10})

	dcg, err := adm.DescribeConsumerGroups(ctx, group)
	if err != nil {
		report.Fatalf("DescribeConsumerGroups: %v", err)
	}
	d := dcg[group]
	var subs []string
	for _, m := range d.Members {
		regex := "<none>"
		if m.SubscribedTopicRegex != nil {
			regex = strings.ReplaceAll(*m.SubscribedTopicRegex, prefix, "<prefix>")
		}
		subs = append(subs, fmt.Sprintf("regex=%s names=%d", regex, len(m.SubscribedTopics)))
	}
	sort.Strings(subs)
	summary["describe_consumer_groups"] = map[string]any{"error": errName(d.Err), "state": d.State, "members": len(d.Members), "subscriptions": subs}

	// A third matching topic, created while the group runs.
	created, err = adm.CreateTopics(ctx, 2, 1, nil, prefix+"-c")
	if err != nil || created.Error() != nil {
		report.Fatalf("CreateTopics: %v %v", err, created.Error())
	}
	began := time.Now()
	report.WaitFor("the new matching topic assigned", 60*time.Second, func() (bool, string) {
		a, b := assignedCount()
		return a+b == 6 && a == 3 && b == 3, fmt.Sprint(owners())
	})
	report.Step("new topic assigned %s after its creation", time.Since(began))
	summary["assignment_after_new_topic"] = owners()
	produce(prefix + "-c")
	committedAll("the new topic consumed and committed", map[string]int64{"a0": 10, "a1": 10, "b0": 10, "b1": 10, "c0": 10, "c1": 10})

	mu.Lock()
	dupes := 0
	for _, n := range seen {
		if n > 1 {
			dupes++
		}
	}
	summary["records_consumed"] = len(seen)
	summary["duplicates"] = dupes
	summary["errors"] = errs
	mu.Unlock()

	for _, cl := range clients {
		cl.Close()
	}
	polling.Wait()
	all := append(topics, prefix+"-c")
	if dt, err := adm.DeleteTopics(ctx, all...); err != nil || dt.Error() != nil {
		report.Fatalf("DeleteTopics: %v %v", err, dt.Error())
	}
	return summary
}
