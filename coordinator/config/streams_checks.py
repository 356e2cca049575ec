"""Kafka 4.4's GroupCoordinatorConfig requirements on the group.streams.* broker settings.

How this works: ``Settings`` calls ``check_streams_settings`` once its fields are read; each
failed requirement is a ``ValueError`` with Kafka's message ("%s must be greater than or equal
to %s", "%s must not contain duplicate tag keys."), which the settings loader reports as a
startup error.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["check_streams_settings"]


class StreamsSettings(Protocol):
    """The settings read here (``Settings`` has them; no import of it, which imports this)."""

    @property
    def group_streams_assignment_interval_ms(self) -> int: ...
    @property
    def group_streams_min_assignment_interval_ms(self) -> int: ...
    @property
    def group_streams_max_assignment_interval_ms(self) -> int: ...
    @property
    def group_streams_task_offset_interval_ms(self) -> int: ...
    @property
    def group_streams_min_task_offset_interval_ms(self) -> int: ...
    @property
    def streams_rack_aware_assignment_tags(self) -> tuple[str, ...]: ...


def check_streams_settings(s: StreamsSettings) -> None:
    """The streams intervals within their bounds, the rack-aware tag keys without duplicates."""
    interval = "group.streams.assignment.interval.ms"
    offsets = "group.streams.task.offset.interval.ms"
    for failed, message in (
        (
            s.group_streams_assignment_interval_ms < s.group_streams_min_assignment_interval_ms,
            f"{interval} must be greater than or equal to group.streams.min.assignment.interval.ms",
        ),
        (
            s.group_streams_assignment_interval_ms > s.group_streams_max_assignment_interval_ms,
            f"{interval} must be less than or equal to group.streams.max.assignment.interval.ms",
        ),
        (
            s.group_streams_task_offset_interval_ms < s.group_streams_min_task_offset_interval_ms,
            f"{offsets} must be greater than or equal to group.streams.min.task.offset.interval.ms",
        ),
    ):
        if failed:
            raise ValueError(message)
    tags = s.streams_rack_aware_assignment_tags
    if len(set(tags)) != len(tags):
        raise ValueError(
            "group.streams.rack.aware.assignment.tags must not contain duplicate tag keys."
        )
