"""Topology descriptions (KIP-1331), Kafka 4.4 with its default configuration vs kgc.

Kafka 4.4 without ``group.streams.topology.description.plugin.class`` stores no topology
description: StreamsGroupTopologyDescriptionUpdate is refused (UNSUPPORTED_VERSION with its
text) before the group, member or description is looked at, a heartbeat never sets
TopologyDescriptionRequired, and a describe asking for the description gets NOT_STORED
(NOT_REQUESTED when not asked, and on a group answered with an error). The scenario pushes
descriptions for an unknown group, for blank ids and for a real member, and describes the
group with and without the flag, in both describe versions.
"""

from __future__ import annotations

import pytest
from support.diffkit import Runner, Side
from support.diffstreamskit import SG_HEARTBEAT, join, wait_source_seen

from protocol.messages import streams_group_describe as sgd
from protocol.messages import streams_group_heartbeat as sgh
from protocol.messages import streams_group_topology_description_update as sgtdu

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

SG_DESCRIBE = sgd.API_KEY
SG_TOPOLOGY_DESCRIPTION_UPDATE = sgtdu.API_KEY


def _description(source: str) -> sgtdu.TopologyDescription:
    node = sgtdu.TopologyDescriptionNode
    return sgtdu.TopologyDescription(
        subtopologies=[
            sgtdu.TopologyDescriptionSubtopology(
                subtopology_id="0",
                nodes=[
                    node("KSTREAM-SOURCE-0000000000", 1, [source], None, [], ["p"]),
                    node("p", 2, [], None, ["store"], ["KSTREAM-SINK-0000000002"]),
                    node("KSTREAM-SINK-0000000002", 3, [], "out", [], []),
                ],
            )
        ]
    )


def _push(
    side: Side, group: str, member: str, epoch: int, description: sgtdu.TopologyDescription
) -> sgtdu.StreamsGroupTopologyDescriptionUpdateResponse:
    req = sgtdu.StreamsGroupTopologyDescriptionUpdateRequest(
        group_id=group, member_id=member, topology_epoch=epoch, topology_description=description
    )
    resp: sgtdu.StreamsGroupTopologyDescriptionUpdateResponse = side.call(
        SG_TOPOLOGY_DESCRIPTION_UPDATE, 0, req, step=f"push[{group!r},{member!r}]"
    )
    return resp


def topology_descriptions(side: Side) -> None:
    group = side.name("sg-desc")
    source = side.name("sg-desc-in")
    side.wait_coordinator(group)
    side.create_topic(source, 2)
    wait_source_seen(side, source)
    _push(side, side.name("sg-desc-none"), "m", 0, _description(source))
    _push(side, "", "", 0, sgtdu.TopologyDescription())
    # A source-only topology: no internal topics, so the group is ready at once.
    topo = sgh.Topology(
        epoch=0, subtopologies=[sgh.Subtopology(subtopology_id="0", source_topics=[source])]
    )
    joined: sgh.StreamsGroupHeartbeatResponse = side.call(
        SG_HEARTBEAT, 1, join(group, "m1", topo), step="join"
    )
    _push(side, group, joined.member_id or "m1", 0, _description(source))
    _push(side, group, "not-a-member", 0, _description(source))
    for version, include in ((1, True), (1, False), (0, False)):
        side.call(
            SG_DESCRIBE,
            version,
            sgd.StreamsGroupDescribeRequest(
                group_ids=[group], include_topology_description=include
            ),
            step=f"describe_v{version}_include_{include}",
        )
    side.call(
        SG_DESCRIBE,
        1,
        sgd.StreamsGroupDescribeRequest(
            group_ids=[side.name("sg-desc-none")], include_topology_description=True
        ),
        step="describe_unknown_include",
    )


def test_topology_descriptions_without_plugin(diff_shared: Runner) -> None:
    outcome = diff_shared(topology_descriptions)
    steps = {e.step: e.response for e in outcome.kafka.exchanges}
    assert steps["join"].topology_description_required is False
    described = steps["describe_v1_include_True"].groups[0]
    assert (described.error_code, described.topology_description_status) == (0, 1)
    assert steps["describe_unknown_include"].groups[0].topology_description_status == 0
    pushed = [s for s in steps if s.startswith("push[")]
    assert len(pushed) == 4
    for s in pushed:
        assert steps[s].error_code == 35
        assert steps[s].error_message == (
            "The broker has no streams group topology description plugin configured."
        )
