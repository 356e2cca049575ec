"""The group APIs are advertised at Kafka 4.4's versions (found by the differential suite:
Kafka 4.4 serves DeleteGroups v3, KIP-1043's per-group ErrorMessage)."""

from __future__ import annotations

from coordinator.apis import SUPPORTED
from protocol.framing import encode_body
from protocol.messages import delete_groups


def test_delete_groups_v3_is_served_with_its_error_message() -> None:
    assert SUPPORTED[delete_groups.API_KEY] == (0, 3)
    resp = delete_groups.DeleteGroupsResponse(
        results=[delete_groups.DeletableGroupResult(group_id="g", error_code=68)]
    )
    decoded, _ = delete_groups.RESPONSE_DECODERS[3](encode_body(delete_groups.API_KEY, 3, resp), 0)
    assert decoded.results[0].error_message is None  # Kafka 4.4 sends none for these codes
    assert decoded.results[0].error_code == 68
