package main

// The failover scenario: a member that crashes. Member a runs in this process, member b in
// a child process (this program with -role member) so that it can be killed outright:
// no LeaveGroup, no more heartbeats. Both consume and commit half of a first batch; b is
// SIGKILLed; a second batch is produced. The coordinator must expire b's session (6 s)
// and rebalance, and a must then own every partition and resume b's from b's committed
// offsets: it reads the second batch whole and nothing of the first that b had committed.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"kgc/tests/go/internal/report"
)

const failoverSession = 6 * time.Second // Kafka's group.min.session.timeout.ms

func failoverOpts(bootstrap, topic, group, name string, onChange func(map[int32]bool)) []kgo.Opt {
	var mu sync.Mutex
	owned := map[int32]bool{}
	update := func(ps []int32, add bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps {
			if add {
				owned[p] = true
			} else {
				delete(owned, p)
			}
		}
		snapshot := map[int32]bool{}
		for p := range owned {
			snapshot[p] = true
		}
		onChange(snapshot)
	}
	return []kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.ClientID("kgc-go-failover-" + name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.SessionTimeout(failoverSession),
		kgo.HeartbeatInterval(500 * time.Millisecond),
		kgo.RebalanceTimeout(10 * time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { update(m[topic], true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { update(m[topic], false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { update(m[topic], false) }),
	}
}

func partitionList(set map[int32]bool) []int32 {
	out := make([]int32, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// memberRole is the child: consume and commit until killed, printing each assignment.
func memberRole(bootstrap, topic, group string) {
	var out sync.Mutex
	opts := failoverOpts(bootstrap, topic, group, "b", func(owned map[int32]bool) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf("assigned %v\n", partitionList(owned))
	})
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		report.Fatalf("member: %v", err)
	}
	// Killed by the parent; the deadline and the parent-death signal end an orphan.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(t string, p int32, err error) { report.Fatalf("member fetch %s[%d]: %v", t, p, err) })
		if fs.NumRecords() > 0 {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				report.Step("member commit: %v", err)
			}
		}
	}
}

func produceRange(ctx context.Context, bootstrap, topic string, from, to int, nparts int32) {
	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		report.Fatalf("producer: %v", err)
	}
	defer producer.Close()
	var batch []*kgo.Record
	for i := from; i < to; i++ {
		batch = append(batch, &kgo.Record{Topic: topic, Partition: int32(i % int(nparts)), Value: []byte(fmt.Sprintf("r%d", i))})
	}
	if err := producer.ProduceSync(ctx, batch...).FirstErr(); err != nil {
		report.Fatalf("ProduceSync: %v", err)
	}
}

func failoverScenario(ctx context.Context, bootstrap, topic, group string, nparts int32, records int, adm *kadm.Client) report.Summary {
	summary := report.Summary{"client": "franz-go", "scenario": "failover"}
	created, err := adm.CreateTopics(ctx, nparts, 1, nil, topic)
	if err != nil || created[topic].Err != nil {
		report.Fatalf("CreateTopics: %v %v", err, created[topic].Err)
	}

	var mu sync.Mutex
	var aOwned, bOwned map[int32]bool
	a, err := kgo.NewClient(failoverOpts(bootstrap, topic, group, "a", func(o map[int32]bool) {
		mu.Lock()
		aOwned = o
		mu.Unlock()
	})...)
	if err != nil {
		report.Fatalf("member a: %v", err)
	}
	defer a.Close()
	seen := map[[2]int64]int{}
	var aErrs []string
	var polling sync.WaitGroup
	polling.Add(1)
	go func() {
		defer polling.Done()
		for {
			fs := a.PollFetches(ctx)
			if fs.IsClientClosed() || ctx.Err() != nil {
				return
			}
			fs.EachError(func(t string, p int32, err error) {
				mu.Lock()
				aErrs = append(aErrs, fmt.Sprintf("fetch %s[%d]: %v", t, p, err))
				mu.Unlock()
			})
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { seen[[2]int64{int64(r.Partition), r.Offset}]++ })
			mu.Unlock()
			if fs.NumRecords() > 0 {
				if err := a.CommitUncommittedOffsets(ctx); err != nil {
					mu.Lock()
					aErrs = append(aErrs, "commit: "+err.Error())
					mu.Unlock()
				}
			}
		}
	}()

	child := exec.Command(os.Args[0], "-role", "member", "-bootstrap", bootstrap, "-topic", topic, "-group", group)
	child.Stderr = os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := child.StdoutPipe()
	if err != nil {
		report.Fatalf("child pipe: %v", err)
	}
	if err := child.Start(); err != nil {
		report.Fatalf("start member b: %v", err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			var ps []int32
			fields := strings.Fields(strings.Trim(strings.TrimPrefix(lines.Text(), "assigned "), "[]"))
			for _, f := range fields {
				var p int32
				fmt.Sscan(f, &p)
				ps = append(ps, p)
			}
			owned := map[int32]bool{}
			for _, p := range ps {
				owned[p] = true
			}
			mu.Lock()
			bOwned = owned
			mu.Unlock()
		}
	}()

	half := int(nparts) / 2
	report.WaitFor("each member holding half the partitions", 45*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		ap, bp := partitionList(aOwned), partitionList(bOwned)
		union, disjoint := report.Union([][]int32{ap, bp})
		return len(ap) == half && len(bp) == half && disjoint && len(union) == int(nparts), fmt.Sprintf("a=%v b=%v", ap, bp)
	})
	mu.Lock()
	aBefore := aOwned
	mu.Unlock()
	summary["partitions_before"] = []int{half, half}

	firstEnd := int64(records / int(nparts))
	produceRange(ctx, bootstrap, topic, 0, records, nparts)
	waitCommitted := func(what string, want int64) map[string]int64 {
		committed := map[string]int64{}
		report.WaitFor(what, 30*time.Second, func() (bool, string) {
			got, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				return false, err.Error()
			}
			committed = map[string]int64{}
			ok := true
			for p := int32(0); p < nparts; p++ {
				o, _ := got.Lookup(topic, p)
				committed[fmt.Sprint(p)] = o.At
				ok = ok && o.Err == nil && o.At == want
			}
			return ok, fmt.Sprint(committed)
		})
		return committed
	}
	summary["committed_before_crash"] = waitCommitted("both halves of the first batch committed", firstEnd)

	if err := child.Process.Kill(); err != nil {
		report.Fatalf("kill member b: %v", err)
	}
	killed := time.Now()
	produceRange(ctx, bootstrap, topic, records, 2*records, nparts)
	report.WaitFor("member a owning every partition", 45*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(aOwned) == int(nparts), fmt.Sprint(partitionList(aOwned))
	})
	took := time.Since(killed)
	report.Step("takeover %s after the kill", took)
	summary["takeover_waited_for_the_session_timeout"] = took >= failoverSession-time.Second && took < 5*failoverSession
	summary["committed_after_takeover"] = waitCommitted("every partition committed to the end", 2*firstEnd)

	mu.Lock()
	var fromB, firstOfB, dupes, total int
	for key, n := range seen {
		total++
		if n > 1 {
			dupes++
		}
		if !aBefore[int32(key[0])] {
			fromB++
			if key[1] < firstEnd {
				firstOfB++
			}
		}
	}
	summary["a_records"] = total
	summary["a_records_of_bs_partitions"] = fromB
	summary["a_rereads_of_bs_committed_records"] = firstOfB
	summary["a_duplicates"] = dupes
	summary["a_errors"] = aErrs
	mu.Unlock()

	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		report.Fatalf("DescribeGroups: %v", err)
	}
	d := dg[group]
	summary["describe_groups"] = map[string]any{"error": errName(d.Err), "state": d.State, "members": len(d.Members), "protocol": d.Protocol}

	a.Close()
	polling.Wait()
	if dt, err := adm.DeleteTopics(ctx, topic); err != nil || dt[topic].Err != nil {
		report.Fatalf("DeleteTopics: %v %v", err, dt[topic].Err)
	}
	return summary
}
