package main

// The offsets-topic scenario: what a Go tool reading __consumer_offsets (as kminion does,
// with franz-go and kmsg) sees of one classic group's life. A kgo consumer joins, consumes
// and commits, then leaves; kadm deletes the group. A direct kgo consumer reads the
// group's __consumer_offsets partition from the start until the group's tombstone and
// decodes each record of the group with kmsg. The summary lists those records in log
// order with the generated parts (member ids, timestamps) left out, and the leader epochs
// of the batches that held them.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"kgc/tests/go/internal/report"
)

// javaHash is Java's String.hashCode, which places a group on an offsets partition.
func javaHash(s string) int32 {
	var h int32
	for _, c := range s { // ASCII group names: one UTF-16 unit per rune
		h = 31*h + int32(c)
	}
	return h
}

func offsetsPartition(group string, n int32) int32 {
	h := javaHash(group)
	if h == -2147483648 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % n
}

// describeRecord is one __consumer_offsets record of the group, without generated values
// (member ids, timestamps); nil when the record is not the group's.
func describeRecord(r *kgo.Record, group, clientID string) map[string]any {
	if len(r.Key) < 2 {
		return nil
	}
	version := int16(r.Key[0])<<8 | int16(r.Key[1])
	switch version {
	case 0, 1:
		var k kmsg.OffsetCommitKey
		if err := k.ReadFrom(r.Key); err != nil || k.Group != group {
			return nil
		}
		out := map[string]any{"kind": "offset", "key_version": k.Version, "partition": k.Partition, "tombstone": r.Value == nil}
		if r.Value == nil {
			return out
		}
		var v kmsg.OffsetCommitValue
		if err := v.ReadFrom(r.Value); err != nil {
			out["error"] = err.Error()
			return out
		}
		metadata := v.Metadata
		if strings.HasPrefix(metadata, clientID+"-") {
			metadata = "<member id>" // kgo commits its member id as the metadata
		}
		out["offset_value_version"] = v.Version
		out["offset"] = v.Offset
		out["leader_epoch"] = v.LeaderEpoch
		out["metadata"] = metadata
		out["expire_timestamp"] = v.ExpireTimestamp
		out["offset_topic_id_set"] = v.TopicID != [16]byte{}
		return out
	case 2:
		var k kmsg.GroupMetadataKey
		if err := k.ReadFrom(r.Key); err != nil || k.Group != group {
			return nil
		}
		out := map[string]any{"kind": "group", "key_version": k.Version, "tombstone": r.Value == nil}
		if r.Value == nil {
			return out
		}
		var v kmsg.GroupMetadataValue
		if err := v.ReadFrom(r.Value); err != nil {
			out["error"] = err.Error()
			return out
		}
		out["group_value_version"] = v.Version
		out["protocol_type"] = v.ProtocolType
		out["generation"] = v.Generation
		out["protocol"] = v.Protocol
		out["leader_is_member"] = v.Leader != nil && len(v.Members) > 0 && *v.Leader == v.Members[0].MemberID
		var members []map[string]any
		for _, m := range v.Members {
			members = append(members, map[string]any{
				"client_id":          m.ClientID,
				"client_host":        m.ClientHost,
				"rebalance_timeout":  m.RebalanceTimeoutMillis,
				"session_timeout":    m.SessionTimeoutMillis,
				"instance_id":        m.InstanceID,
				"subscription_bytes": len(m.Subscription),
				"assignment_bytes":   len(m.Assignment),
			})
		}
		out["members"] = members
		return out
	}
	return nil
}

func offsetsTopicScenario(ctx context.Context, bootstrap, topic, group string, adm *kadm.Client) report.Summary {
	summary := report.Summary{"client": "franz-go", "scenario": "offsets-topic"}
	created, err := adm.CreateTopics(ctx, 1, 1, nil, topic)
	if err != nil || created[topic].Err != nil {
		report.Fatalf("CreateTopics: %v %v", err, created[topic].Err)
	}

	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.DefaultProduceTopic(topic))
	if err != nil {
		report.Fatalf("producer: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			report.Fatalf("produce: %v", err)
		}
	}
	producer.Close()

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ClientID("kgc-go-offsets"),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(30*time.Second),
		kgo.RebalanceTimeout(20*time.Second),
	)
	if err != nil {
		report.Fatalf("consumer: %v", err)
	}
	got := 0
	for got < 3 {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			report.Fatalf("consuming: %v (%d records)", err, got)
		}
		fs.EachError(func(t string, p int32, err error) { report.Fatalf("fetch %s[%d]: %v", t, p, err) })
		got += fs.NumRecords()
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		report.Fatalf("commit: %v", err)
	}
	consumer.Close() // LeaveGroup
	report.WaitFor("group Empty", 20*time.Second, func() (bool, string) {
		l, err := adm.ListGroups(ctx)
		if err != nil {
			return false, err.Error()
		}
		return l[group].State == "Empty", l[group].State
	})
	del, err := adm.DeleteGroup(ctx, group)
	if err != nil || del.Err != nil {
		report.Fatalf("DeleteGroup: %v %v", err, del.Err)
	}

	// Read the group's offsets partition from the start until the group's tombstone.
	partition := offsetsPartition(group, 50)
	reader, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
			"__consumer_offsets": {partition: kgo.NewOffset().AtStart()},
		}),
		kgo.FetchMaxWait(500*time.Millisecond),
	)
	if err != nil {
		report.Fatalf("reader: %v", err)
	}
	defer reader.Close()
	var records []map[string]any
	epochs := map[int32]bool{}
	done := false
	readCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for !done {
		fs := reader.PollFetches(readCtx)
		if readCtx.Err() != nil {
			report.Fatalf("no group tombstone in __consumer_offsets-%d after 20 s; read: %v", partition, records)
		}
		fs.EachError(func(t string, p int32, err error) { report.Fatalf("fetch %s[%d]: %v", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			rec := describeRecord(r, group, "kgc-go-offsets")
			if rec == nil {
				return
			}
			records = append(records, rec)
			epochs[r.LeaderEpoch] = true
			if rec["kind"] == "group" && rec["tombstone"] == true {
				done = true
			}
		})
	}
	var epochList []int32
	for e := range epochs {
		epochList = append(epochList, e)
	}
	report.Step("read __consumer_offsets-%d", partition)
	summary["group_records"] = records
	sort.Slice(epochList, func(i, j int) bool { return epochList[i] < epochList[j] })
	summary["batch_leader_epochs"] = epochList
	return summary
}
