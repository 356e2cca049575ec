"""The log-engine settings (``LogConfig``) of the offsets log, from the broker settings.

How this works: ``log_config`` lays a topic's own configs over the broker defaults;
``offsets_log_config`` makes the offsets log compacted, with Kafka's
``offsets.topic.segment.bytes`` segments, journaled in one process and small, time-bounded
segments in cluster mode.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.config.settings import Settings
from storage.interface import LogConfig


def log_config(settings: Settings, topic_configs: dict[str, str] | None = None) -> LogConfig:
    """The log-engine settings for a topic: its own configs over the broker defaults."""
    c = topic_configs or {}
    return LogConfig(
        segment_bytes=int(c.get("segment.bytes", settings.log_segment_bytes)),
        segment_ms=int(c.get("segment.ms", settings.log_roll_ms)),
        retention_ms=int(c.get("retention.ms", settings.log_retention_ms)),
        retention_bytes=int(c.get("retention.bytes", settings.log_retention_bytes)),
        cleanup_policy=c.get("cleanup.policy", "delete"),
        delete_retention_ms=int(
            c.get("delete.retention.ms", settings.log_cleaner_delete_retention_ms)
        ),
        min_cleanable_dirty_ratio=float(c.get("min.cleanable.dirty.ratio", 0.5)),
        max_message_bytes=int(c.get("max.message.bytes", settings.message_max_bytes)),
        flush_policy=settings.log_flush_policy,
        flush_interval_ms=settings.log_flush_interval_ms,
        flush_interval_messages=settings.log_flush_interval_messages,
    )


def offsets_log_config(settings: Settings) -> LogConfig:
    """The offsets log is compacted, with Kafka's offsets.topic.segment.bytes segments."""
    cfg = log_config(
        settings,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(settings.offsets_topic_segment_bytes),
            "retention.ms": "-1",
        },
    )
    if settings.cluster_mode:
        # The PostgreSQL journal makes commits durable. The local copy is a cache whose
        # cleaned segments also replace the database's rows (storage/postgres/compaction.py),
        # and the cleaner only takes rolled segments: small, time-bounded segments keep the
        # database's share of an offsets partition, and so a failover's load, small.
        return replace(
            cfg,
            segment_bytes=min(cfg.segment_bytes, CLUSTER_OFFSETS_SEGMENT_BYTES),
            segment_ms=min(cfg.segment_ms, CLUSTER_OFFSETS_SEGMENT_MS),
        )
    # Commits touch many of the 50 partitions at once: one journal fsync covers them all.
    return replace(cfg, journaled=True)


CLUSTER_OFFSETS_SEGMENT_BYTES = 8 << 20
CLUSTER_OFFSETS_SEGMENT_MS = 600_000


def share_state_log_config(settings: Settings) -> LogConfig:
    """``__share_group_state`` as Kafka creates it: not compacted, kept forever (Kafka
    prunes it by deleting records below every key's latest snapshot)."""
    cfg = log_config(settings, {"cleanup.policy": "delete", "retention.ms": "-1"})
    if settings.cluster_mode:
        return cfg
    return replace(cfg, journaled=True)


def txn_state_log_config(settings: Settings) -> LogConfig:
    """``__transaction_state`` as Kafka creates it (``transactionTopicConfigs``):
    compacted, kept forever, ``transaction.state.log.segment.bytes`` segments."""
    cfg = log_config(
        settings,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(settings.transaction_state_log_segment_bytes),
            "retention.ms": "-1",
        },
    )
    if settings.cluster_mode:
        return cfg
    return replace(cfg, journaled=True)


# The history log's segments roll at a tenth of the retention (between a second and a
# day): retention deletes whole segments, so old history is gone within ~10% of it.
HISTORY_SEGMENT_MS_MIN = 1000
HISTORY_SEGMENT_MS_MAX = 86_400_000


def history_log_config(settings: Settings) -> LogConfig:
    """The group history's log (``coordinator.history``): deleted by time after
    ``offsets.history.retention.ms``, journaled like the offsets log, whose fsync rounds
    it shares."""
    retention = settings.offsets_history_retention_ms
    cfg = log_config(
        settings,
        {
            "cleanup.policy": "delete",
            "segment.bytes": str(settings.offsets_topic_segment_bytes),
            "retention.ms": str(retention),
            "retention.bytes": "-1",
        },
    )
    segment_ms = min(max(retention // 10, HISTORY_SEGMENT_MS_MIN), HISTORY_SEGMENT_MS_MAX)
    return replace(cfg, segment_ms=segment_ms, journaled=not settings.cluster_mode)
