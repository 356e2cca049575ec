"""Requests are all-or-nothing: the core changes its state only together with its records.

A request whose records cannot be encoded (a string longer than the offsets log's int16
length allows) is answered UNKNOWN_SERVER_ERROR (ErrorCode.UNKNOWN) -- what Kafka's coordinator answers when
serializing a record throws -- and leaves no trace. OffsetCommit / TxnOffsetCommit /
OffsetDelete for a topic or partition that does not exist answer UNKNOWN_TOPIC_OR_PARTITION
per partition, as Kafka's KafkaApis does before the coordinator sees the request.
"""

from __future__ import annotations

from support.group_context import GroupContext, end_txn, offset_delete, txn_commit

from protocol.errors import ErrorCode
from protocol.framing import RequestHeader, decode_request, encode_request
from protocol.messages import offset_commit
from protocol.messages.join_group import JoinGroupResponse

TOO_LONG = "g" * 40000  # fits a compact (flexible) string, not the log's int16 string
T0 = ("t", 0)


def test_commit_with_unencodable_group_id_changes_nothing() -> None:
    h = GroupContext()
    before = len(h.records)
    assert h.commit(TOO_LONG, {T0: 5, ("t", 1): 6}) == {
        T0: ErrorCode.UNKNOWN,
        ("t", 1): ErrorCode.UNKNOWN,
    }
    assert TOO_LONG not in h.shard.groups
    assert TOO_LONG not in h.shard.offsets
    assert len(h.records) == before
    fetched = h.fetch(TOO_LONG, {"t": [0]})
    assert fetched.topics[0].partitions[0].committed_offset == -1


def test_commit_with_one_unencodable_topic_stores_no_partition() -> None:
    h = GroupContext()
    assert h.commit("g", {T0: 1}) == {T0: 0}
    codes = h.commit("g", {T0: 9, (TOO_LONG, 0): 9})
    assert set(codes.values()) == {ErrorCode.UNKNOWN}
    assert h.committed("g", "t", 0) == 1  # the encodable partition did not move either
    h.assert_replay_equivalent()


def test_txn_commit_with_unencodable_group_id_holds_nothing() -> None:
    h = GroupContext()
    resp = txn_commit(h, TOO_LONG, 7, {T0: 3})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN
    assert TOO_LONG not in h.shard.pending_txn_offsets
    assert TOO_LONG not in h.shard.groups
    before = len(h.records)
    assert end_txn(h, TOO_LONG, 7, True) == ErrorCode.NO_ERROR
    assert len(h.records) == before + 1  # the marker alone: nothing was pending


def test_join_with_unencodable_group_id_creates_no_group() -> None:
    h = GroupContext()
    handle = h.join(TOO_LONG, version=3)
    r = h.reply(handle)
    assert isinstance(r, JoinGroupResponse)
    assert r.error_code == ErrorCode.UNKNOWN
    assert TOO_LONG not in h.shard.groups


def test_join_whose_member_id_would_be_unencodable_is_refused_before_any_change() -> None:
    # The member id is "<client id>-<uuid>": a 32767-byte client id makes it too long for
    # the group metadata record that the rebalance writes later.
    h = GroupContext()
    handle = h.join("g", version=3, client_id="c" * 32767)
    r = h.reply(handle)
    assert isinstance(r, JoinGroupResponse)
    assert r.error_code == ErrorCode.UNKNOWN
    assert "g" not in h.shard.groups
    assert h.timers == {k: v for k, v in h.timers.items() if k == "expire-offsets"}


def test_join_with_unencodable_instance_id_is_refused() -> None:
    h = GroupContext()
    handle = h.join("g", instance=TOO_LONG)
    r = h.reply(handle)
    assert isinstance(r, JoinGroupResponse)
    assert r.error_code == ErrorCode.UNKNOWN
    assert "g" not in h.shard.groups


def test_commit_to_unknown_topic_or_partition_is_refused_per_partition() -> None:
    h = GroupContext(topic_partitions={"t": 2}.get)
    codes = h.commit("g", {T0: 5, ("t", 2): 5, ("nope", 0): 5})
    assert codes == {
        T0: 0,
        ("t", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert h.shard.offsets["g"] == {T0: h.shard.offsets["g"][T0]}
    h.assert_replay_equivalent()


def test_simple_commit_to_only_unknown_topics_creates_no_group() -> None:
    h = GroupContext(topic_partitions={}.get)
    before = len(h.records)
    assert h.commit("simple", {("nope", 0): 1}) == {
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert "simple" not in h.shard.groups and len(h.records) == before


def test_member_commit_to_unknown_topic_is_refused_before_group_checks() -> None:
    h = GroupContext(topic_partitions={"t": 1}.get)
    ids, gen = h.stable_group("g", 1)
    # Kafka filters unknown partitions before the coordinator: no ILLEGAL_GENERATION here.
    assert h.commit("g", {("nope", 0): 1}, member_id=ids[0], generation=gen + 5) == {
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    }
    assert h.commit("g", {T0: 3, ("t", 1): 3}, member_id=ids[0], generation=gen) == {
        T0: 0,
        ("t", 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_txn_commit_and_offset_delete_check_topics_too() -> None:
    h = GroupContext(topic_partitions={"t": 1}.get)
    resp = txn_commit(h, "g", 7, {("nope", 0): 3})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "g" not in h.shard.pending_txn_offsets
    assert h.commit("g", {T0: 1}) == {T0: 0}
    r = offset_delete(h, "g", {"t": [0], "nope": [0]})
    codes = {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}
    assert codes == {T0: 0, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_group_id_that_is_not_utf8_is_decoded_as_kafka_does() -> None:
    # Java's new String(bytes, UTF_8) replaces malformed input with U+FFFD.
    body = offset_commit.Request(group_id="g\x01", generation_id_or_member_epoch=-1)
    frame = encode_request(RequestHeader(offset_commit.API_KEY, 8, 1, "c"), body)[4:]
    bad = frame.replace(b"g\x01", b"g\xff")
    _header, decoded = decode_request(bad)
    assert decoded.group_id == "g\ufffd"
    h = GroupContext()
    assert h.commit(decoded.group_id, {T0: 4}) == {T0: 0}
    assert h.committed("g\ufffd", "t", 0) == 4
    h.assert_replay_equivalent()
