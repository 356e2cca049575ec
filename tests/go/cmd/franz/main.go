// Command franz runs one consumer-group scenario with franz-go (kgo and kadm) against a
// Kafka-protocol server and prints its observable outcome as JSON.
//
// How it works: kadm creates a topic; two kgo consumers join one group (-protocol classic:
// the client-side cooperative-sticky balancer over JoinGroup/SyncGroup; -protocol consumer:
// KIP-848, kgo.ServerSideBalancer with the range balancer, so the server's "range" assignor
// assigns over ConsumerGroupHeartbeat). Once each member holds half the partitions, a kgo
// producer writes records to chosen partitions (record i to partition i%N), both members
// consume and commit, and kadm checks the outcome: ListEndOffsets, FetchOffsets,
// DescribeGroups or DescribeConsumerGroups, ListGroups. Then the members leave (the group
// must become Empty with its offsets kept), kadm deletes the group and the topic.
// Any failed step exits 1 naming it; the summary holds only facts that do not depend on
// member ids or timing, so the same run against kgc and Apache Kafka prints the same JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"kgc/tests/go/internal/report"
)

type member struct {
	name string
	cl   *kgo.Client

	mu       sync.Mutex
	assigned map[int32]bool
	errs     []string
}

func (m *member) partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int32, 0, len(m.assigned))
	for p := range m.assigned {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ledger is shared by the members: who read each (partition, offset), to catch a record
// read twice or a value at the wrong place.
type ledger struct {
	mu     sync.Mutex
	seen   map[[2]int64]string
	dupes  int
	wrong  []string
	closed bool
}

func sortedPartitions(set map[int32]struct{}) []int32 {
	out := make([]int32, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sortedStrings(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

// firstErr names the first non-nil error.
func firstErr(errs ...error) string {
	for _, err := range errs {
		if err != nil {
			return errName(err)
		}
	}
	return ""
}

func errName(err error) string {
	if err == nil {
		return ""
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return err.Error()
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "host:port")
	topic := flag.String("topic", "", "topic to create (unique per run)")
	group := flag.String("group", "", "group id (unique per run)")
	protocol := flag.String("protocol", "classic", "classic, consumer (KIP-848), offsets-topic, failover or consumer-regex (the scenarios of offsets_topic.go, failover.go, regex.go)")
	partitions := flag.Int("partitions", 4, "partitions of the topic")
	records := flag.Int("records", 200, "records to produce")
	assignor := flag.String("assignor", "range", "the server-side assignor of -protocol consumer: range or uniform")
	role := flag.String("role", "", "member: the failover scenario's child (consume and commit until killed)")
	flag.Parse()
	if *role == "member" {
		memberRole(*bootstrap, *topic, *group)
		return
	}
	if *topic == "" || *group == "" {
		report.Fatalf("-topic and -group are required")
	}
	switch *protocol {
	case "classic", "consumer", "offsets-topic", "failover", "consumer-regex":
	default:
		report.Fatalf("-protocol must be classic, consumer, offsets-topic, failover or consumer-regex")
	}
	nparts := int32(*partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	summary := report.Summary{"client": "franz-go", "protocol": *protocol}

	adminCl, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), kgo.ClientID("kgc-go-admin"))
	if err != nil {
		report.Fatalf("admin client: %v", err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)
	switch *protocol {
	case "offsets-topic":
		offsetsTopicScenario(ctx, *bootstrap, *topic, *group, adm).Print()
		return
	case "failover":
		failoverScenario(ctx, *bootstrap, *topic, *group, nparts, *records, adm).Print()
		return
	case "consumer-regex":
		regexScenario(ctx, *bootstrap, *topic, *group, adm).Print()
		return
	}

	created, err := adm.CreateTopics(ctx, nparts, 1, nil, *topic)
	if err != nil {
		report.Fatalf("CreateTopics: %v", err)
	}
	summary["create_topic_error"] = errName(created[*topic].Err)
	report.WaitFor("topic in metadata", 20*time.Second, func() (bool, string) {
		td, err := adm.ListTopics(ctx, *topic)
		if err != nil {
			return false, err.Error()
		}
		t, ok := td[*topic]
		return ok && t.Err == nil && len(t.Partitions) == int(nparts), fmt.Sprintf("%+v", t)
	})

	// Two members of one group.
	book := &ledger{seen: map[[2]int64]string{}}
	var members []*member
	for _, name := range []string{"a", "b"} {
		m := &member{name: name, assigned: map[int32]bool{}}
		opts := []kgo.Opt{
			kgo.SeedBrokers(*bootstrap),
			kgo.ClientID("kgc-go-" + name),
			kgo.ConsumerGroup(*group),
			kgo.ConsumeTopics(*topic),
			kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxWait(500 * time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, got map[string][]int32) {
				m.mu.Lock()
				defer m.mu.Unlock()
				for _, p := range got[*topic] {
					m.assigned[p] = true
				}
			}),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
				m.mu.Lock()
				defer m.mu.Unlock()
				for _, p := range lost[*topic] {
					delete(m.assigned, p)
				}
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
				m.mu.Lock()
				defer m.mu.Unlock()
				for _, p := range lost[*topic] {
					delete(m.assigned, p)
				}
			}),
		}
		if *protocol == "consumer" && *assignor == "uniform" {
			// kgo asks for the server's "uniform" assignor when its balancer is sticky.
			opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
		} else if *protocol == "consumer" {
			opts = append(opts, kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer())
		} else {
			opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			report.Fatalf("consumer %s: %v", name, err)
		}
		m.cl = cl
		members = append(members, m)
	}

	var polling sync.WaitGroup
	for _, m := range members {
		polling.Add(1)
		go func(m *member) {
			defer polling.Done()
			for {
				fs := m.cl.PollFetches(ctx)
				if fs.IsClientClosed() || ctx.Err() != nil {
					return
				}
				fs.EachError(func(t string, p int32, err error) {
					m.mu.Lock()
					m.errs = append(m.errs, fmt.Sprintf("fetch %s[%d]: %v", t, p, err))
					m.mu.Unlock()
				})
				fs.EachRecord(func(r *kgo.Record) {
					book.mu.Lock()
					key := [2]int64{int64(r.Partition), r.Offset}
					if _, dup := book.seen[key]; dup {
						book.dupes++
					}
					book.seen[key] = m.name
					want := fmt.Sprintf("r%d", r.Offset*int64(nparts)+int64(r.Partition))
					if string(r.Value) != want {
						book.wrong = append(book.wrong, fmt.Sprintf("%d@%d=%q want %q", r.Partition, r.Offset, r.Value, want))
					}
					book.mu.Unlock()
				})
				if fs.NumRecords() > 0 {
					if err := m.cl.CommitUncommittedOffsets(ctx); err != nil {
						book.mu.Lock()
						closed := book.closed
						book.mu.Unlock()
						if !closed {
							m.mu.Lock()
							m.errs = append(m.errs, "commit: "+err.Error())
							m.mu.Unlock()
						}
					}
				}
			}
		}(m)
	}

	half := int(nparts) / 2
	report.WaitFor("each member holding half the partitions", 45*time.Second, func() (bool, string) {
		a, b := members[0].partitions(), members[1].partitions()
		union, disjoint := report.Union([][]int32{a, b})
		return len(a) == half && len(b) == half && disjoint && len(union) == int(nparts),
			fmt.Sprintf("a=%v b=%v", a, b)
	})
	a, b := members[0].partitions(), members[1].partitions()
	summary["member_partition_counts"] = report.SortedSizes([][]int32{a, b})
	if *protocol == "consumer" && *assignor == "range" {
		// The range assignor gives each member a contiguous run of partitions.
		lists := [][]int32{a, b}
		sort.Slice(lists, func(i, j int) bool { return lists[i][0] < lists[j][0] })
		summary["member_partitions"] = lists
	}

	// Produce with kgo: record i to partition i % N, so partition p holds r{4k+p} at offset k.
	producer, err := kgo.NewClient(
		kgo.SeedBrokers(*bootstrap),
		kgo.ClientID("kgc-go-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		report.Fatalf("producer: %v", err)
	}
	batch := make([]*kgo.Record, 0, *records)
	for i := 0; i < *records; i++ {
		batch = append(batch, &kgo.Record{
			Topic:     *topic,
			Partition: int32(i % int(nparts)),
			Key:       []byte(fmt.Sprintf("k%d", i)),
			Value:     []byte(fmt.Sprintf("r%d", i)),
		})
	}
	if err := producer.ProduceSync(ctx, batch...).FirstErr(); err != nil {
		report.Fatalf("ProduceSync: %v", err)
	}
	producer.Close()
	report.Step("produced %d records", *records)

	ends, err := adm.ListEndOffsets(ctx, *topic)
	if err != nil || ends.Error() != nil {
		report.Fatalf("ListEndOffsets: %v %v", err, ends.Error())
	}
	endOffsets := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) { endOffsets[fmt.Sprint(o.Partition)] = o.Offset })
	summary["end_offsets"] = endOffsets

	report.WaitFor("every record consumed", 30*time.Second, func() (bool, string) {
		book.mu.Lock()
		defer book.mu.Unlock()
		return len(book.seen) >= *records, fmt.Sprintf("%d of %d", len(book.seen), *records)
	})
	committed := map[string]int64{}
	epochs := map[string]int32{}
	report.WaitFor("committed offsets at the end offsets (FetchOffsets)", 20*time.Second, func() (bool, string) {
		got, err := adm.FetchOffsets(ctx, *group)
		if err != nil {
			return false, err.Error()
		}
		committed = map[string]int64{}
		got.Each(func(o kadm.OffsetResponse) {
			if o.Topic == *topic && o.Err == nil {
				committed[fmt.Sprint(o.Partition)] = o.At
				epochs[fmt.Sprint(o.Partition)] = o.LeaderEpoch
			}
		})
		return fmt.Sprint(committed) == fmt.Sprint(endOffsets), fmt.Sprint(committed)
	})
	summary["committed"] = committed
	summary["committed_leader_epochs"] = epochs

	book.mu.Lock()
	summary["records_consumed"] = len(book.seen)
	summary["duplicates"] = book.dupes
	summary["misplaced_values"] = book.wrong
	perMember := map[string]int{}
	for _, who := range book.seen {
		perMember[who]++
	}
	book.mu.Unlock()
	var counts []int
	for _, m := range members {
		counts = append(counts, perMember[m.name])
	}
	sort.Ints(counts)
	summary["records_per_member"] = counts

	// The group as the admin API sees it while both members are in it.
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		report.Fatalf("ListGroups: %v", err)
	}
	lg := listed[*group]
	summary["listed_stable"] = map[string]string{"type": lg.GroupType, "protocol_type": lg.ProtocolType, "state": lg.State}
	byType, err := adm.ListGroupsByType(ctx, []string{*protocol})
	if err != nil {
		report.Fatalf("ListGroupsByType: %v", err)
	}
	_, summary["listed_by_own_type"] = byType[*group]
	other := map[string]string{"classic": "consumer", "consumer": "classic"}[*protocol]
	byOther, err := adm.ListGroupsByType(ctx, []string{other})
	if err != nil {
		report.Fatalf("ListGroupsByType: %v", err)
	}
	_, summary["listed_by_other_type"] = byOther[*group]

	dg, err := adm.DescribeGroups(ctx, *group)
	if err != nil {
		report.Fatalf("DescribeGroups: %v", err)
	}
	d := dg[*group]
	classicView := map[string]any{"error": errName(d.Err), "error_message": strings.ReplaceAll(d.ErrMessage, *group, "<group>")}
	if d.Err == nil {
		var assigned [][]int32
		var clients []string
		for _, m := range d.Members {
			clients = append(clients, m.ClientID+" "+m.ClientHost)
			if c, ok := m.Assigned.AsConsumer(); ok {
				for _, t := range c.Topics {
					if t.Topic == *topic {
						assigned = append(assigned, t.Partitions)
					}
				}
			}
		}
		union, disjoint := report.Union(assigned)
		classicView = map[string]any{
			"error":          "",
			"state":          d.State,
			"protocol_type":  d.ProtocolType,
			"protocol":       d.Protocol,
			"members":        len(d.Members),
			"assigned_sizes": report.SortedSizes(assigned),
			"assigned_all":   len(union) == int(nparts) && disjoint,
			"clients":        sortedStrings(clients),
		}
	}
	summary["describe_groups"] = classicView

	dcg, err := adm.DescribeConsumerGroups(ctx, *group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) {
			report.Fatalf("DescribeConsumerGroups: %v", err)
		}
	}
	cd := dcg[*group]
	consumerView := map[string]any{"error": errName(cd.Err)}
	if err != nil && cd.Err == nil {
		consumerView["error"] = errName(err)
	}
	if cd.Err == nil && err == nil {
		var assigned, target [][]int32
		var clients []string
		epochsMatch := true
		for _, m := range cd.Members {
			subscribed := len(m.SubscribedTopics) == 1 && m.SubscribedTopics[0] == *topic
			clients = append(clients, fmt.Sprintf("%s %s type=%d subscribed-to-topic=%v", m.ClientID, m.ClientHost, m.MemberType, subscribed))
			assigned = append(assigned, sortedPartitions(m.Assignment[*topic]))
			target = append(target, sortedPartitions(m.TargetAssignment[*topic]))
			if m.MemberEpoch != cd.Epoch {
				epochsMatch = false
			}
		}
		union, disjoint := report.Union(assigned)
		consumerView = map[string]any{
			"error":                     "",
			"state":                     cd.State,
			"assignor":                  cd.AssignorName,
			"members":                   len(cd.Members),
			"assigned_sizes":            report.SortedSizes(assigned),
			"assigned_all":              len(union) == int(nparts) && disjoint,
			"assignment_is_target":      fmt.Sprint(assigned) == fmt.Sprint(target),
			"member_epochs_are_group":   epochsMatch,
			"assignment_epoch_is_group": cd.AssignmentEpoch == cd.Epoch,
			"clients":                   sortedStrings(clients),
		}
	}
	summary["describe_consumer_groups"] = consumerView

	// Admin calls on the active group: an admin commit (no member), OffsetDelete of a topic
	// the members consume, DeleteGroups -- all refused while members are in it -- and Lag.
	one := kadm.Offsets{*topic: {0: {Topic: *topic, Partition: 0, At: 1, LeaderEpoch: -1}}}
	oneSet := kadm.TopicsSet{*topic: {0: {}}}
	active := map[string]any{}
	cr, err := adm.CommitOffsets(ctx, *group, one)
	active["admin_commit_error"] = firstErr(err, cr.Error())
	do, err := adm.DeleteOffsets(ctx, *group, oneSet)
	active["delete_offsets_error"] = firstErr(err, do.Error())
	dr, err := adm.DeleteGroup(ctx, *group)
	active["delete_group_error"] = firstErr(err, dr.Err)
	lags, err := adm.Lag(ctx, *group)
	lag := lags[*group]
	active["lag_errors"] = []string{errName(err), errName(lag.DescribeErr), errName(lag.FetchErr)}
	active["lag_total"] = lag.Lag.Total()
	active["lag_state"] = lag.State
	summary["admin_on_active_group"] = active

	var errs []string
	for _, m := range members {
		m.mu.Lock()
		errs = append(errs, m.errs...)
		m.mu.Unlock()
	}
	summary["client_errors"] = errs

	// The members leave: the group stays, Empty, with its offsets.
	book.mu.Lock()
	book.closed = true
	book.mu.Unlock()
	for _, m := range members {
		m.cl.Close()
	}
	polling.Wait()
	report.WaitFor("group Empty after both members left", 20*time.Second, func() (bool, string) {
		l, err := adm.ListGroups(ctx)
		if err != nil {
			return false, err.Error()
		}
		return l[*group].State == "Empty", fmt.Sprintf("%+v", l[*group])
	})
	listed, err = adm.ListGroups(ctx)
	if err != nil {
		report.Fatalf("ListGroups: %v", err)
	}
	lg = listed[*group]
	summary["listed_after_leave"] = map[string]string{"type": lg.GroupType, "protocol_type": lg.ProtocolType, "state": lg.State}
	if *protocol == "classic" {
		dg, err = adm.DescribeGroups(ctx, *group)
		if err != nil {
			report.Fatalf("DescribeGroups: %v", err)
		}
		summary["describe_after_leave"] = map[string]any{"state": dg[*group].State, "members": len(dg[*group].Members), "error": errName(dg[*group].Err)}
	} else {
		dcg, err = adm.DescribeConsumerGroups(ctx, *group)
		if err != nil {
			report.Fatalf("DescribeConsumerGroups: %v", err)
		}
		summary["describe_after_leave"] = map[string]any{"state": dcg[*group].State, "members": len(dcg[*group].Members), "error": errName(dcg[*group].Err)}
	}
	kept, err := adm.FetchOffsets(ctx, *group)
	if err != nil {
		report.Fatalf("FetchOffsets after leave: %v", err)
	}
	keptOffsets := map[string]int64{}
	kept.Each(func(o kadm.OffsetResponse) {
		if o.Topic == *topic {
			keptOffsets[fmt.Sprint(o.Partition)] = o.At
		}
	})
	summary["committed_after_leave"] = keptOffsets

	// The same admin calls on the Empty group succeed.
	empty := map[string]any{}
	cr, err = adm.CommitOffsets(ctx, *group, one)
	empty["admin_commit_error"] = firstErr(err, cr.Error())
	after, err := adm.FetchOffsets(ctx, *group)
	if err != nil {
		report.Fatalf("FetchOffsets: %v", err)
	}
	o, _ := after.Lookup(*topic, 0)
	empty["committed_0_after_admin_commit"] = o.At
	do, err = adm.DeleteOffsets(ctx, *group, oneSet)
	empty["delete_offsets_error"] = firstErr(err, do.Error())
	after, err = adm.FetchOffsets(ctx, *group)
	if err != nil {
		report.Fatalf("FetchOffsets: %v", err)
	}
	_, still := after.Lookup(*topic, 0)
	empty["partition_0_listed_after_delete_offsets"] = still
	empty["partitions_listed_after_delete_offsets"] = len(after[*topic])
	summary["admin_on_empty_group"] = empty

	// Delete the group, then the topic.
	del, err := adm.DeleteGroup(ctx, *group)
	if err != nil {
		report.Fatalf("DeleteGroup: %v", err)
	}
	summary["delete_group_error"] = errName(del.Err)
	listed, err = adm.ListGroups(ctx)
	if err != nil {
		report.Fatalf("ListGroups: %v", err)
	}
	_, summary["listed_after_delete"] = listed[*group]
	gone, err := adm.FetchOffsets(ctx, *group)
	summary["fetch_offsets_after_delete"] = map[string]any{"error": errName(err), "offsets": len(gone)}

	dt, err := adm.DeleteTopics(ctx, *topic)
	if err != nil {
		report.Fatalf("DeleteTopics: %v", err)
	}
	summary["delete_topic_error"] = errName(dt[*topic].Err)
	report.WaitFor("topic gone from ListTopics", 20*time.Second, func() (bool, string) {
		td, err := adm.ListTopics(ctx)
		if err != nil {
			return false, err.Error()
		}
		_, there := td[*topic]
		return !there, fmt.Sprintf("listed=%v", there)
	})
	summary.Print()
}
