"""Per-request accounting: the structures the hot path bumps, read at scrape time.

How this works: the server answers ~150k requests/s, so this accounting does not use
prometheus-client's locked metric children. ``Metrics.on_request`` (registry.py) bumps plain
integers in a ``Slot`` cached per (API, version) and a per-API ``Latency`` bucket array;
``collector.request_families`` turns them into ``kgc_requests_total{api,version,error}`` and
``kgc_request_duration_seconds{api}`` at scrape time. A request counts under its response's
top-level ``error_code`` when the response has one (``NONE`` otherwise). ConsumerGroupHeartbeat
answers by error code are read from the same slots (no extra work per heartbeat).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import BY_KEY

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
OFFSET_COMMIT_KEYS = frozenset({8, 28})  # OffsetCommit, TxnOffsetCommit
CONSUMER_GROUP_HEARTBEAT_KEY = 68


def api_name(key: int) -> str:
    mod = BY_KEY.get(key)
    if mod is None:
        return f"Api{key}"
    return "".join(part.capitalize() for part in mod.__name__.rsplit(".", 1)[-1].split("_"))


def error_label(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class Latency:
    """One API's latency histogram: counts per ``LATENCY_BUCKETS`` bound (+Inf last)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0


class Slot:
    """Counters of one (API, version); ``errors`` by code, ``count`` includes them."""

    __slots__ = ("api", "count", "counts", "errors", "latency", "version")

    def __init__(self, api: str, version: int, latency: Latency) -> None:
        self.api = api
        self.version = version
        self.count = 0
        self.errors: dict[int, int] = {}
        self.latency = latency
        self.counts = latency.counts  # the API's buckets, shared by its versions
