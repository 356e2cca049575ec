"""StreamsGroupHeartbeat requests of the differential streams-group scenarios (KIP-1071).

How this works: ``topology`` is the word count's two subtopologies (a source topic, a
repartition topic, a changelog) as a member declares them; ``join`` is a first heartbeat
(member epoch 0, no tasks owned) whose fields a scenario overrides by keyword, ``LEAVE`` the
overrides of a leaving heartbeat; ``wait_source_seen`` waits, unrecorded, until the side's
coordinator knows a new source topic (Kafka's learns of it from its metadata image a moment
after Metadata names the leaders) by joining a throwaway group until no
MISSING_SOURCE_TOPICS comes back.
"""

from __future__ import annotations

import time
from typing import Any

from protocol.messages import streams_group_heartbeat as sgh
from support.diffkit import Side

SG_HEARTBEAT = sgh.API_KEY


def topology(source: str, app: str) -> sgh.Topology:
    return sgh.Topology(
        epoch=0,
        subtopologies=[
            sgh.Subtopology(
                subtopology_id="0",
                source_topics=[source],
                repartition_sink_topics=[f"{app}-words-repartition"],
            ),
            sgh.Subtopology(
                subtopology_id="1",
                repartition_source_topics=[
                    sgh.SubtopologyTopicInfo(
                        name=f"{app}-words-repartition",
                        topic_configs=[
                            sgh.SubtopologyTopicInfoKeyValue("cleanup.policy", "delete"),
                            sgh.SubtopologyTopicInfoKeyValue("retention.ms", "-1"),
                        ],
                    )
                ],
                state_changelog_topics=[
                    sgh.TopicInfo(
                        name=f"{app}-counts-changelog",
                        topic_configs=[sgh.KeyValue("cleanup.policy", "compact")],
                    )
                ],
            ),
        ],
    )


def join(
    group: str, member: str, topo: sgh.Topology | None, **kw: Any
) -> sgh.StreamsGroupHeartbeatRequest:
    req = sgh.StreamsGroupHeartbeatRequest(
        group_id=group,
        member_id=member,
        member_epoch=0,
        endpoint_information_epoch=-1,
        rebalance_timeout_ms=300000,
        topology=topo,
        active_tasks=[],
        standby_tasks=[],
        warmup_tasks=[],
        process_id="3f1a0d8c-6c7e-4b8e-9f3a-2d4c5b6a7e8f",
        client_tags=[],
    )
    for k, v in kw.items():
        setattr(req, k, v)
    return req


def wait_source_seen(side: Side, source: str) -> None:
    """Wait (unrecorded) until the coordinator knows ``source``: Kafka's learns of a new topic
    from its metadata image a moment after Metadata names the leaders. A throwaway group
    joins until no MISSING_SOURCE_TOPICS comes back, then leaves."""
    deadline = time.monotonic() + side.timeout
    attempt = 0
    while time.monotonic() < deadline:
        attempt += 1
        probe = f"probe-{attempt}-{source}-p"  # not ending in the token: never listed
        side.wait_coordinator(probe)
        topo = sgh.Topology(
            subtopologies=[sgh.Subtopology(subtopology_id="0", source_topics=[source])]
        )
        conn = side.untimed()
        r = conn.call(SG_HEARTBEAT, 1, join(probe, "p", topo))
        conn.call(SG_HEARTBEAT, 1, join(probe, "p", None, **LEAVE))
        if r.error_code == 0 and all(st.status_code != 1 for st in r.status or ()):
            return
        time.sleep(0.1)
    raise AssertionError(f"{side.label}: {source} never seen by the group coordinator")


LEAVE: dict[str, Any] = {
    "member_epoch": -1,
    "active_tasks": None,
    "standby_tasks": None,
    "warmup_tasks": None,
}
