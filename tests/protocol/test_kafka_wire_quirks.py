"""Where Kafka's request/response classes rewrite a field on the wire, the codec does too."""

from __future__ import annotations

import pytest

from protocol.framing import encode_body
from protocol.messages import join_group


def _decoded(version: int, resp: join_group.JoinGroupResponse) -> join_group.JoinGroupResponse:
    data = encode_body(join_group.API_KEY, version, resp)
    decoded, _ = join_group.RESPONSE_DECODERS[version](data, 0)
    return decoded


@pytest.mark.parametrize("version", [7, 8, 9])
def test_join_group_empty_protocol_name_is_null_from_v7(version: int) -> None:
    # Kafka's JoinGroupResponse constructor: "" becomes null where the field is nullable
    # (seen on MEMBER_ID_REQUIRED and every other error answer).
    resp = join_group.JoinGroupResponse(error_code=79, member_id="m-1", protocol_name="")
    assert _decoded(version, resp).protocol_name is None


@pytest.mark.parametrize("version", [0, 4, 6])
def test_join_group_null_protocol_name_is_empty_before_v7(version: int) -> None:
    resp = join_group.JoinGroupResponse(error_code=79, member_id="m-1", protocol_name=None)
    assert _decoded(version, resp).protocol_name == ""


def test_join_group_selected_protocol_name_is_sent() -> None:
    resp = join_group.JoinGroupResponse(generation_id=1, protocol_name="range")
    assert _decoded(9, resp).protocol_name == "range"
