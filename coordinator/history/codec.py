"""The history's binary form: one record value per turn.

How this works: a value holds every entry one turn wrote, all stamped with the turn's
time. An offset change keeps the OffsetCommit records its request wrote to the offsets log
(Kafka's key -- group, topic, partition -- and value -- offset, leader epoch, metadata,
commit time -- exactly as the core encoded them, so the commit path encodes nothing twice),
beside who committed (member, client, host: strings written once per value in a table and
named by their index), each partition's offset before and its unchanged commits. The whole
value is then LZ4-compressed, which takes out what the records repeat (the group and topic
names of every key)::

    value    := lz4_block_with_size(plain)
    plain    := version:u8 time_ms:i64 nstrings:u16 (len:u16 utf8)* section*
    section  := 1 member:u16 client:u16 host:u16 n:u16 previous:i64{n} unchanged:u32{n}
                  key_len:u16{n} value_len:u16{n} key{n} value{n}          (offsets)
              | 3 group:u16 kind:u16 generation:i32 cause:u16 reason:u16 member:u16
                  members:i32 duration_ms:i64                               (membership)

Integers are little-endian; string indexes name the table, index 0 is the empty string;
``value_len`` 0xFFFF is a tombstone (an admin's delete; ``previous`` is what it removed).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import cramjam

from coordinator.history.model import DELETED, MembershipChange, OffsetChange, OffsetHistoryEntry
from storage.records import OffsetCommitKey, decode_key, decode_offset_commit_value

__all__ = ["VERSION", "HistoryFormatError", "decode", "encode"]

VERSION = 1
_OFFSETS, _MEMBERSHIP = 1, 3
_HEAD = struct.Struct("<BqH")
_LEN = struct.Struct("<H")
_SECTION = struct.Struct("<BHHHH")
_MEMBER = struct.Struct("<BHHiHHHiq")
_TOMBSTONE = 0xFFFF
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF


class HistoryFormatError(ValueError):
    """A history value that does not decode (a newer version, or damage)."""


def encode(time_ms: int, entries: Iterable[OffsetChange | MembershipChange]) -> bytes:
    """One value holding ``entries`` (offset changes and membership changes), written at
    ``time_ms``."""
    strings: dict[str, int] = {"": 0}
    body = bytearray()

    def s(text: str) -> int:
        i = strings.get(text)
        if i is None:
            i = strings[text] = len(strings)
        return i

    length = _LEN.pack
    for e in entries:
        if type(e) is OffsetChange:
            n = len(e.records)
            body += _SECTION.pack(_OFFSETS, s(e.member_id), s(e.client_id), s(e.host), n)
            body += struct.pack(f"<{n}q", *e.previous)
            unchanged = e.unchanged
            if max(unchanged) > _U32:
                unchanged = [min(u, _U32) for u in unchanged]
            body += struct.pack(f"<{n}I", *unchanged)
            # columns, each packed by one C call: no Python step per partition
            _, keys, values = zip(*e.records, strict=True)
            body += struct.pack(f"<{n}H", *map(len, keys))
            if None in values:  # an admin's delete: a tombstone
                body += struct.pack(
                    f"<{n}H", *(_TOMBSTONE if v is None else len(v) for v in values)
                )
                values = tuple(v for v in values if v is not None)
            else:
                body += struct.pack(f"<{n}H", *map(len, values))
            body += b"".join(keys)
            body += b"".join(values)
        else:
            assert isinstance(e, MembershipChange)
            body += _MEMBER.pack(
                _MEMBERSHIP,
                s(e.group_id),
                s(e.kind),
                e.generation,
                s(e.cause),
                s(e.reason),
                s(e.member_id),
                e.members,
                e.duration_ms,
            )
    if len(strings) > _U16:
        raise ValueError("more than 65535 strings in one history value")
    head = bytearray(_HEAD.pack(VERSION, time_ms, len(strings) - 1))
    for text in list(strings)[1:]:
        raw = text.encode("utf-8", "surrogatepass")[:_U16]
        head += length(len(raw))
        head += raw
    head += body
    return bytes(cramjam.lz4.compress_block(head))


def decode(
    value: bytes, group_id: str | None = None
) -> list[OffsetHistoryEntry | MembershipChange]:
    """The entries of one value (only ``group_id``'s when given), in the order written."""
    try:
        plain = bytes(cramjam.lz4.decompress_block(value))
        if group_id is not None and group_id.encode("utf-8", "surrogatepass") not in plain:
            return []  # not a byte of it names the group: skip without parsing
        return _decode(plain, group_id)
    except HistoryFormatError:
        raise
    except (struct.error, IndexError, ValueError, cramjam.DecompressionError) as exc:
        raise HistoryFormatError(f"history value does not decode: {exc}") from None


def _chunk(plain: bytes, pos: int) -> tuple[bytes | None, int]:
    (size,) = _LEN.unpack_from(plain, pos)
    pos += 2
    if size == _TOMBSTONE:
        return None, pos
    raw = plain[pos : pos + size]
    if len(raw) != size:
        raise HistoryFormatError("history value cut short")
    return raw, pos + size


def _decode(plain: bytes, group_id: str | None) -> list[OffsetHistoryEntry | MembershipChange]:
    version, time_ms, n = _HEAD.unpack_from(plain, 0)
    if version != VERSION:
        raise HistoryFormatError(f"history value of version {version}, this kgc reads {VERSION}")
    table = [""]
    pos = _HEAD.size
    for _ in range(n):
        raw, pos = _chunk(plain, pos)
        table.append((raw or b"").decode("utf-8", "surrogatepass"))
    out: list[OffsetHistoryEntry | MembershipChange] = []
    end = len(plain)
    while pos < end:
        kind = plain[pos]
        if kind == _OFFSETS:
            _, member, client, host, count = _SECTION.unpack_from(plain, pos)
            pos += _SECTION.size
            previous = struct.unpack_from(f"<{count}q", plain, pos)
            pos += 8 * count
            unchanged = struct.unpack_from(f"<{count}I", plain, pos)
            pos += 4 * count
            key_lens = struct.unpack_from(f"<{count}H", plain, pos)
            pos += 2 * count
            value_lens = struct.unpack_from(f"<{count}H", plain, pos)
            pos += 2 * count
            keys = []
            for size in key_lens:
                keys.append(plain[pos : pos + size])
                pos += size
            for i in range(count):
                size = value_lens[i]
                value = None
                if size != _TOMBSTONE:
                    value = plain[pos : pos + size]
                    pos += size
                if pos > end:
                    raise HistoryFormatError("history value cut short")
                k = decode_key(keys[i])
                if not isinstance(k, OffsetCommitKey):
                    raise HistoryFormatError("history entry without an offset commit key")
                if group_id is not None and k.group != group_id:
                    continue
                if value is None:
                    offset, epoch, metadata, ts = DELETED, -1, "", time_ms
                else:
                    v = decode_offset_commit_value(value)
                    offset, epoch, metadata, ts = (
                        v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                    )  # fmt: skip
                out.append(
                    OffsetHistoryEntry(
                        time_ms, k.group, k.topic, k.partition, offset, previous[i], epoch,
                        metadata, ts, table[member], table[client], table[host], unchanged[i],
                    )
                )  # fmt: skip
        elif kind == _MEMBERSHIP:
            _, g, k2, generation, cause, reason, member, members, duration = _MEMBER.unpack_from(
                plain, pos
            )
            pos += _MEMBER.size
            if group_id is None or table[g] == group_id:
                out.append(
                    MembershipChange(
                        time_ms, table[g], table[k2], generation, table[cause], table[reason],
                        table[member], members, duration,
                    )
                )  # fmt: skip
        else:
            raise HistoryFormatError(f"unknown history section {kind}")
    return out
