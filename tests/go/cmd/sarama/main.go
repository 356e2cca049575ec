// Command sarama runs one consumer-group scenario with IBM/sarama against a Kafka-protocol
// server and prints its observable outcome as JSON.
//
// How it works: a ClusterAdmin creates a topic; two sarama ConsumerGroup members (one
// client each, auto-commit off, the balance strategy of -strategy) join one group and
// consume through a ConsumerGroupHandler that marks every message and commits the session
// whenever its claim's buffer is drained. Once each member's session holds half the
// partitions, an idempotent SyncProducer sends records to chosen partitions (record i to
// partition i%N, the manual partitioner). When every record is read, the ClusterAdmin
// checks the committed offsets (ListConsumerGroupOffsets) against the partitions' end
// offsets (Client.GetOffset), DescribeConsumerGroups and ListConsumerGroups; then the members
// close (the group must become Empty with its offsets kept) and the admin deletes the
// group and the topic. Any failed step exits 1 naming it; the summary holds only facts that
// do not depend on member ids or timing, so the same run against kgc and Apache Kafka
// prints the same JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"kgc/tests/go/internal/report"
)

type member struct {
	name  string
	group sarama.ConsumerGroup

	mu     sync.Mutex
	claims []int32
	errs   []string
}

func (m *member) partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int32(nil), m.claims...)
}

func (m *member) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs = append(m.errs, fmt.Sprintf(format, args...))
}

type ledger struct {
	mu    sync.Mutex
	seen  map[[2]int64]string
	dupes int
	wrong []string
}

type handler struct {
	m      *member
	book   *ledger
	topic  string
	nparts int64
}

func (h *handler) Setup(s sarama.ConsumerGroupSession) error {
	claims := append([]int32(nil), s.Claims()[h.topic]...)
	sort.Slice(claims, func(i, j int) bool { return claims[i] < claims[j] })
	h.m.mu.Lock()
	h.m.claims = claims
	h.m.mu.Unlock()
	return nil
}

func (h *handler) Cleanup(sarama.ConsumerGroupSession) error {
	h.m.mu.Lock()
	h.m.claims = nil
	h.m.mu.Unlock()
	return nil
}

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			h.book.mu.Lock()
			key := [2]int64{int64(msg.Partition), msg.Offset}
			if _, dup := h.book.seen[key]; dup {
				h.book.dupes++
			}
			h.book.seen[key] = h.m.name
			want := fmt.Sprintf("r%d", msg.Offset*h.nparts+int64(msg.Partition))
			if string(msg.Value) != want {
				h.book.wrong = append(h.book.wrong, fmt.Sprintf("%d@%d=%q want %q", msg.Partition, msg.Offset, msg.Value, want))
			}
			h.book.mu.Unlock()
			s.MarkMessage(msg, "")
			if len(claim.Messages()) == 0 {
				s.Commit() // synchronous with auto-commit off; errors arrive on Errors()
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func errName(err error) string {
	if err == nil {
		return ""
	}
	var ke sarama.KError
	if errors.As(err, &ke) {
		if ke == sarama.ErrNoError {
			return ""
		}
		return fmt.Sprintf("%d %s", int16(ke), ke.Error())
	}
	return err.Error()
}

// kafkaVersion is the protocol level sarama speaks (-version): its newest by default.
var kafkaVersion = sarama.MaxVersion

func newConfig(clientID, strategy string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = kafkaVersion
	cfg.ClientID = clientID
	cfg.Metadata.RefreshFrequency = 0
	switch strategy {
	case "range":
		cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	case "sticky":
		cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	case "cooperative-sticky":
		cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	default:
		report.Fatalf("unknown -strategy %q", strategy)
	}
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	return cfg
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "host:port")
	topic := flag.String("topic", "", "topic to create (unique per run)")
	group := flag.String("group", "", "group id (unique per run)")
	strategy := flag.String("strategy", "sticky", "range, sticky or cooperative-sticky")
	partitions := flag.Int("partitions", 4, "partitions of the topic")
	records := flag.Int("records", 200, "records to produce")
	version := flag.String("version", "", "the Kafka version sarama assumes: default (sarama.DefaultVersion) or x.y.z; unset: its newest, "+sarama.MaxVersion.String())
	flag.Parse()
	if *version == "default" {
		kafkaVersion = sarama.DefaultVersion // what a sarama.NewConfig() user gets
	} else if *version != "" {
		v, err := sarama.ParseKafkaVersion(*version)
		if err != nil {
			report.Fatalf("-version: %v", err)
		}
		kafkaVersion = v
	}
	if *topic == "" || *group == "" {
		report.Fatalf("-topic and -group are required")
	}
	nparts := int32(*partitions)
	brokers := []string{*bootstrap}
	summary := report.Summary{"client": "sarama", "strategy": *strategy, "version": kafkaVersion.String()}

	client, err := sarama.NewClient(brokers, newConfig("kgc-go-admin", *strategy))
	if err != nil {
		report.Fatalf("client: %v", err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		report.Fatalf("cluster admin: %v", err)
	}

	err = admin.CreateTopic(*topic, &sarama.TopicDetail{NumPartitions: nparts, ReplicationFactor: 1}, false)
	summary["create_topic_error"] = errName(err)
	if err != nil {
		report.Fatalf("CreateTopic: %v", err)
	}
	report.WaitFor("topic in metadata", 20*time.Second, func() (bool, string) {
		if err := client.RefreshMetadata(*topic); err != nil {
			return false, err.Error()
		}
		ps, err := client.Partitions(*topic)
		return err == nil && len(ps) == int(nparts), fmt.Sprintf("%v %v", ps, err)
	})

	book := &ledger{seen: map[[2]int64]string{}}
	var members []*member
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var consuming sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		m := &member{name: name}
		g, err := sarama.NewConsumerGroup(brokers, *group, newConfig("kgc-go-"+name, *strategy))
		if err != nil {
			report.Fatalf("consumer group %s: %v", name, err)
		}
		m.group = g
		members = append(members, m)
		h := &handler{m: m, book: book, topic: *topic, nparts: int64(nparts)}
		consuming.Add(2)
		go func() {
			defer consuming.Done()
			for err := range g.Errors() {
				m.fail("%v", err)
			}
		}()
		go func() {
			defer consuming.Done()
			for {
				if err := g.Consume(ctx, []string{*topic}, h); err != nil {
					if errors.Is(err, sarama.ErrClosedConsumerGroup) {
						return
					}
					m.fail("Consume: %v", err)
				}
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}

	half := int(nparts) / 2
	report.WaitFor("each member's session holding half the partitions", 45*time.Second, func() (bool, string) {
		a, b := members[0].partitions(), members[1].partitions()
		union, disjoint := report.Union([][]int32{a, b})
		return len(a) == half && len(b) == half && disjoint && len(union) == int(nparts),
			fmt.Sprintf("a=%v b=%v", a, b)
	})
	summary["member_partition_counts"] = report.SortedSizes([][]int32{members[0].partitions(), members[1].partitions()})

	// An idempotent SyncProducer: record i to partition i % N.
	pcfg := newConfig("kgc-go-producer", *strategy)
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Idempotent = true
	pcfg.Net.MaxOpenRequests = 1
	pcfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(brokers, pcfg)
	if err != nil {
		report.Fatalf("producer: %v", err)
	}
	msgs := make([]*sarama.ProducerMessage, 0, *records)
	for i := 0; i < *records; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic:     *topic,
			Partition: int32(i % int(nparts)),
			Key:       sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value:     sarama.StringEncoder(fmt.Sprintf("r%d", i)),
		})
	}
	if err := producer.SendMessages(msgs); err != nil {
		report.Fatalf("SendMessages: %v", err)
	}
	placed := true
	for i, msg := range msgs {
		if msg.Partition != int32(i%int(nparts)) || msg.Offset != int64(i/int(nparts)) {
			placed = false
		}
	}
	summary["produced_at_expected_offsets"] = placed
	if err := producer.Close(); err != nil {
		report.Fatalf("producer close: %v", err)
	}
	report.Step("produced %d records", *records)

	endOffsets := map[string]int64{}
	var all []int32
	for p := int32(0); p < nparts; p++ {
		all = append(all, p)
		end, err := client.GetOffset(*topic, p, sarama.OffsetNewest)
		if err != nil {
			report.Fatalf("GetOffset: %v", err)
		}
		endOffsets[fmt.Sprint(p)] = end
	}
	summary["end_offsets"] = endOffsets

	report.WaitFor("every record consumed", 30*time.Second, func() (bool, string) {
		book.mu.Lock()
		defer book.mu.Unlock()
		return len(book.seen) >= *records, fmt.Sprintf("%d of %d", len(book.seen), *records)
	})
	fetchCommitted := func() (map[string]int64, map[string]int32, error) {
		resp, err := admin.ListConsumerGroupOffsets(*group, map[string][]int32{*topic: all})
		if err != nil {
			return nil, nil, err
		}
		if resp.Err != sarama.ErrNoError {
			return nil, nil, resp.Err
		}
		offs, epochs := map[string]int64{}, map[string]int32{}
		for _, p := range all {
			b := resp.GetBlock(*topic, p)
			if b == nil || b.Err != sarama.ErrNoError {
				continue
			}
			offs[fmt.Sprint(p)] = b.Offset
			epochs[fmt.Sprint(p)] = b.LeaderEpoch
		}
		return offs, epochs, nil
	}
	committed, epochs := map[string]int64{}, map[string]int32{}
	report.WaitFor("committed offsets at the end offsets (ListConsumerGroupOffsets)", 20*time.Second, func() (bool, string) {
		c, e, err := fetchCommitted()
		if err != nil {
			return false, err.Error()
		}
		committed, epochs = c, e
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
	counts := []int{perMember["a"], perMember["b"]}
	sort.Ints(counts)
	summary["records_per_member"] = counts

	describe := func() *sarama.GroupDescription {
		ds, err := admin.DescribeConsumerGroups([]string{*group})
		if err != nil || len(ds) != 1 {
			report.Fatalf("DescribeConsumerGroups: %v (%d groups)", err, len(ds))
		}
		return ds[0]
	}
	d := describe()
	var assigned [][]int32
	var clients []string
	for _, m := range d.Members {
		clients = append(clients, m.ClientId+" "+m.ClientHost)
		a, err := m.GetMemberAssignment()
		if err != nil {
			report.Fatalf("member assignment: %v", err)
		}
		assigned = append(assigned, a.Topics[*topic])
	}
	sort.Strings(clients)
	union, disjoint := report.Union(assigned)
	summary["describe_groups"] = map[string]any{
		"error":          errName(d.Err),
		"state":          d.State,
		"protocol_type":  d.ProtocolType,
		"protocol":       d.Protocol,
		"members":        len(d.Members),
		"assigned_sizes": report.SortedSizes(assigned),
		"assigned_all":   len(union) == int(nparts) && disjoint,
		"clients":        clients,
	}
	listed, err := admin.ListConsumerGroups()
	if err != nil {
		report.Fatalf("ListConsumerGroups: %v", err)
	}
	summary["listed_protocol_type"] = listed[*group]

	var errs []string
	for _, m := range members {
		m.mu.Lock()
		errs = append(errs, m.errs...)
		m.mu.Unlock()
	}
	summary["client_errors"] = errs

	// The members close (LeaveGroup): the group stays, Empty, with its offsets.
	for _, m := range members {
		if err := m.group.Close(); err != nil {
			report.Fatalf("close member %s: %v", m.name, err)
		}
	}
	consuming.Wait()
	report.WaitFor("group Empty after both members closed", 20*time.Second, func() (bool, string) {
		d := describe()
		return d.State == "Empty", d.State
	})
	d = describe()
	summary["describe_after_leave"] = map[string]any{"state": d.State, "members": len(d.Members), "error": errName(d.Err)}
	kept, _, err := fetchCommitted()
	if err != nil {
		report.Fatalf("ListConsumerGroupOffsets after leave: %v", err)
	}
	summary["committed_after_leave"] = kept

	err = admin.DeleteConsumerGroup(*group)
	summary["delete_group_error"] = errName(err)
	listed, err = admin.ListConsumerGroups()
	if err != nil {
		report.Fatalf("ListConsumerGroups: %v", err)
	}
	_, summary["listed_after_delete"] = listed[*group]
	d = describe()
	summary["describe_after_delete"] = map[string]any{"state": d.State, "members": len(d.Members), "error": errName(d.Err)}

	err = admin.DeleteTopic(*topic)
	summary["delete_topic_error"] = errName(err)
	report.WaitFor("topic gone from ListTopics", 20*time.Second, func() (bool, string) {
		ts, err := admin.ListTopics()
		if err != nil {
			return false, err.Error()
		}
		_, there := ts[*topic]
		return !there, fmt.Sprintf("listed=%v", there)
	})
	summary.Print()
}
