"""The history's binary form: one record value per turn.

How this works: a value holds every entry one turn wrote, all stamped with the turn's
time. An offset change keeps the OffsetCommit records its request wrote to the offsets log
(Kafka's key -- group, topic, partition -- and value -- offset, leader epoch, metadata,
commit time -- exactly as the core encoded them, so the commit path encodes nothing twice),
beside who committed (member, client, host: strings written once per value in a table and
named by their index), each partition's offset before and its unchanged commits. The turn's
requests are laid out as columns, each packed by one C call for the whole turn, so a
request costs a few list extensions and no Python step per partition; the value is then
LZ4-compressed, which takes out what the records repeat (the group and topic names of every
key)::

    value    := lz4_block_with_size(plain)
    plain    := version:u8 time_ms:i64 nstrings:u16 (len:u16 utf8)*
                nrequests:u32 nparts:u32 nmembership:u16
                (member:u16 client:u16 host:u16 n:u16){nrequests}
                previous:i64{nparts} unchanged:u32{nparts}
                key_len:u16{nparts} value_len:u16{nparts} key{nparts} value{nparts}
                (group:u16 kind:u16 generation:i32 cause:u16 reason:u16 member:u16
                 members:i32 duration_ms:i64){nmembership}

Integers are little-endian; string indexes name the table, index 0 is the empty string;
a request's n partitions are the next n of the columns; ``value_len`` 0xFFFF is a
tombstone (an admin's delete; ``previous`` is what it removed).

A merged value (version 2, ``merge``) holds several turns: the plain forms of the values
it replaces, in their order, compressed together, so what one turn repeats of the one
before (every key, the strings, most bytes of the offsets) is taken out too. The cluster's
table merges its older rows into such values (``docs/history.md``)::

    merged   := lz4_block_with_size(2:u8 nplains:u32 plain_len:u32{nplains} plain{nplains})

A merged value's entries are those of its plains, in order, each stamped with its own
turn's time.

A plain value (``encode(..., compressed=False)``) is the plain form not compressed, behind a
mark no compressed value starts with: what the local history log carries in its journal and
then stores in one batch of many values that Kafka's lz4 codec compresses together, once,
taking out what each turn repeats of the one before (``coordinator/history/store.py``)::

    plain_value := ff ff ff ff plain
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import cramjam

from coordinator.history.model import DELETED, MembershipChange, OffsetChange, OffsetHistoryEntry
from storage.records import OffsetCommitKey, decode_key, decode_offset_commit_value

__all__ = [
    "MERGED_VERSION",
    "PLAIN",
    "VERSION",
    "HistoryFormatError",
    "compress",
    "decode",
    "encode",
    "merge",
]

VERSION = 1
MERGED_VERSION = 2
# A plain value starts with these bytes: as a compressed value's size (little-endian u32) they
# would say 4 GiB, more than LZ4 compresses (at most 0x7E000000 bytes).
PLAIN = b"\xff\xff\xff\xff"
_MERGED_HEAD = struct.Struct("<BI")
_HEAD = struct.Struct("<BqH")
_COUNTS = struct.Struct("<IIH")
_LEN = struct.Struct("<H")
_MEMBER = struct.Struct("<HHiHHHiq")
_TOMBSTONE = 0xFFFF
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
# (format letter, count) -> its Struct (``merge``'s lengths).
_COLUMNS: dict[tuple[str, int], struct.Struct] = {}
# What ``encode`` looked up before: a string table's bytes, the columns' Struct of
# (requests, partitions); each cleared when it holds ``_CACHED``.
_TABLES: dict[tuple[str, ...], bytes] = {}
_LAYOUTS: dict[tuple[int, int], struct.Struct] = {}
_CACHED = 4096


def _column(letter: str, n: int) -> struct.Struct:
    s = _COLUMNS.get((letter, n))
    if s is None:
        s = struct.Struct(f"<{n}{letter}")
        if len(_COLUMNS) < 4096:
            _COLUMNS[(letter, n)] = s
    return s


class HistoryFormatError(ValueError):
    """A history value that does not decode (a newer version, or damage)."""


def compress(value: bytes) -> bytes:
    """A plain value (``encode(..., compressed=False)``) compressed."""
    return bytes(cramjam.lz4.compress_block(memoryview(value)[len(PLAIN) :]))


def _plain_of(value: bytes) -> bytes:
    if value[: len(PLAIN)] == PLAIN:
        return value[len(PLAIN) :]
    return bytes(cramjam.lz4.decompress_block(value))


def encode(
    time_ms: int, entries: Iterable[OffsetChange | MembershipChange], compressed: bool = True
) -> bytes:
    """One value holding ``entries`` (offset changes and membership changes), written at
    ``time_ms``; not ``compressed``, a plain value (``PLAIN``).

    On the commit path, once a turn, so it takes few Python steps: a request's strings are
    interned by ``setdefault``, the string table's bytes looked up for a table seen before
    (the same members commit turn after turn), and the columns packed by one ``pack`` for
    the whole turn."""
    strings: dict[str, int] = {"": 0}
    intern = strings.setdefault
    heads: list[int] = []
    previous: list[int] = []
    unchanged: list[int] = []
    keys: list[bytes] = []
    values: list[bytes | None] = []
    add_key = keys.append
    add_value = values.append
    members: list[bytes] = []
    for e in entries:
        if type(e) is OffsetChange:
            # (Unpacked: a NamedTuple's fields are descriptors, each read a lookup.)
            _partition, _group, member, client, host, records, before, counts = e
            heads += (
                intern(member, len(strings)),
                intern(client, len(strings)),
                intern(host, len(strings)),
                len(records),
            )
            previous += before
            unchanged += counts
            for _p, key, value in records:  # (a loop costs less than zip(*records))
                add_key(key)
                add_value(value)
        else:
            assert isinstance(e, MembershipChange)
            members.append(
                _MEMBER.pack(
                    intern(e.group_id, len(strings)),
                    intern(e.kind, len(strings)),
                    e.generation,
                    intern(e.cause, len(strings)),
                    intern(e.reason, len(strings)),
                    intern(e.member_id, len(strings)),
                    e.members,
                    e.duration_ms,
                )
            )
    if len(strings) > _U16 or len(members) > _U16:
        raise ValueError("more than 65535 strings or membership changes in one history value")
    table = tuple(strings)
    section = _TABLES.get(table)
    if section is None:
        section = _table(table)
    n = len(keys)
    requests = len(heads) // 4
    if not n:  # membership changes alone
        columns = data = b""
    else:
        layout = _LAYOUTS.get((requests, n))
        if layout is None:
            layout = _layout(requests, n)
        try:
            columns = layout.pack(
                *heads,
                *previous,
                *unchanged,
                *map(len, keys),
                *map(len, values),  # type: ignore[arg-type]
            )
            data = b"".join(values)  # type: ignore[arg-type]
        except (TypeError, struct.error):
            # An admin's delete (a tombstone: len(None)), or an unchanged count past 32 bits.
            columns = layout.pack(
                *heads,
                *previous,
                *(min(u, _U32) for u in unchanged),
                *map(len, keys),
                *(_TOMBSTONE if v is None else len(v) for v in values),
            )
            data = b"".join(v for v in values if v is not None)
    plain = b"".join(
        [
            b"" if compressed else PLAIN,
            _HEAD.pack(VERSION, time_ms, len(table) - 1),
            section,
            _COUNTS.pack(requests, n, len(members)),
            columns,
            b"".join(keys),
            data,
            *members,
        ]
    )
    return bytes(cramjam.lz4.compress_block(plain)) if compressed else plain


def _table(table: tuple[str, ...]) -> bytes:
    """The string table's bytes (its first string, index 0, is the empty one: not written)."""
    parts = []
    for text in table[1:]:
        raw = text.encode("utf-8", "surrogatepass")[:_U16]
        parts.append(_LEN.pack(len(raw)))
        parts.append(raw)
    section = b"".join(parts)
    if len(_TABLES) >= _CACHED:
        _TABLES.clear()
    _TABLES[table] = section
    return section


def _layout(requests: int, n: int) -> struct.Struct:
    """The columns of ``requests`` requests of ``n`` partitions in all, as one Struct."""
    layout = struct.Struct(f"<{4 * requests}H{n}q{n}I{n}H{n}H")
    if len(_LAYOUTS) >= _CACHED:
        _LAYOUTS.clear()
    _LAYOUTS[(requests, n)] = layout
    return layout


def merge(values: Iterable[bytes]) -> bytes:
    """One merged value (version 2) holding the turns of ``values`` (turn values or merged
    ones), in that order: decoding it gives their entries, in that order."""
    plains: list[bytes] = []
    try:
        for value in values:
            plains += _plains(_plain_of(value))
    except HistoryFormatError:
        raise
    except (struct.error, ValueError, cramjam.DecompressionError) as exc:
        raise HistoryFormatError(f"history value does not decode: {exc}") from None
    for plain in plains:
        if not plain or plain[0] != VERSION:
            version = plain[0] if plain else None
            raise HistoryFormatError(
                f"history value of version {version}, this kgc reads {VERSION}"
            )
    head = _MERGED_HEAD.pack(MERGED_VERSION, len(plains))
    lengths = _column("I", len(plains)).pack(*map(len, plains))
    return bytes(cramjam.lz4.compress_block(b"".join([head, lengths, *plains])))


def _plains(plain: bytes) -> list[bytes]:
    """The turns' plain forms in a decompressed value (one, or a merged value's)."""
    if not plain or plain[0] != MERGED_VERSION:
        return [plain]
    _version, n = _MERGED_HEAD.unpack_from(plain, 0)
    lengths = struct.unpack_from(f"<{n}I", plain, _MERGED_HEAD.size)
    pos = _MERGED_HEAD.size + 4 * n
    if pos + sum(lengths) != len(plain):
        raise HistoryFormatError("merged history value of the wrong length")
    out = []
    for size in lengths:
        out.append(plain[pos : pos + size])
        pos += size
    return out


def decode(
    value: bytes, group_id: str | None = None
) -> list[OffsetHistoryEntry | MembershipChange]:
    """The entries of one value (only ``group_id``'s when given), in the order written."""
    try:
        plain = _plain_of(value)
        if group_id is None:
            needle = None
        else:
            needle = group_id.encode("utf-8", "surrogatepass")
            if needle not in plain:
                return []  # not a byte of it names the group: skip without parsing
        if plain[:1] != bytes([MERGED_VERSION]):
            return _decode(plain, group_id)
        out: list[OffsetHistoryEntry | MembershipChange] = []
        for turn in _plains(plain):
            if needle is None or needle in turn:
                out += _decode(turn, group_id)
        return out
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
    requests, nparts, nmembers = _COUNTS.unpack_from(plain, pos)
    pos += _COUNTS.size
    heads = struct.unpack_from(f"<{4 * requests}H", plain, pos)
    pos += 8 * requests
    previous = struct.unpack_from(f"<{nparts}q", plain, pos)
    pos += 8 * nparts
    unchanged = struct.unpack_from(f"<{nparts}I", plain, pos)
    pos += 4 * nparts
    key_lens = struct.unpack_from(f"<{nparts}H", plain, pos)
    pos += 2 * nparts
    value_lens = struct.unpack_from(f"<{nparts}H", plain, pos)
    pos += 2 * nparts
    keys = []
    for size in key_lens:
        keys.append(plain[pos : pos + size])
        pos += size
    values: list[bytes | None] = []
    for size in value_lens:
        if size == _TOMBSTONE:
            values.append(None)
            continue
        values.append(plain[pos : pos + size])
        pos += size
    if pos + nmembers * _MEMBER.size != len(plain) or sum(heads[3::4]) != nparts:
        raise HistoryFormatError("history value of the wrong length")
    out: list[OffsetHistoryEntry | MembershipChange] = []
    start = 0
    for r in range(requests):
        member, client, host, count = heads[4 * r : 4 * r + 4]
        start += count
        for i in range(start - count, start):
            k = decode_key(keys[i])
            if not isinstance(k, OffsetCommitKey):
                raise HistoryFormatError("history entry without an offset commit key")
            if group_id is not None and k.group != group_id:
                continue
            value = values[i]
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
    for _ in range(nmembers):
        g, kind, generation, cause, reason, member, members, duration = _MEMBER.unpack_from(
            plain, pos
        )
        pos += _MEMBER.size
        if group_id is None or table[g] == group_id:
            out.append(
                MembershipChange(
                    time_ms, table[g], table[kind], generation, table[cause], table[reason],
                    table[member], members, duration,
                )
            )  # fmt: skip
    return out
