"""ApiVersions answered by the dispatcher: the advertised table, and KIP-511's check of the
client's software name and version (v3+), as Kafka's ApiVersionsRequest.isValid does."""

from __future__ import annotations

import pytest

from coordinator.apis import dispatcher
from coordinator.server.handler import ClientInfo
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages import api_versions, share_group_heartbeat

CLIENT = ClientInfo(client_id="t", host="127.0.0.1", port=1, conn_id=1)


def _ask(version: int, name: str, software_version: str) -> api_versions.ApiVersionsResponse:
    dispatch = dispatcher()
    body = dispatch.api_versions(
        RequestHeader(api_versions.API_KEY, version, 1, "t"),
        api_versions.ApiVersionsRequest(
            client_software_name=name, client_software_version=software_version
        ),
        CLIENT,
    )
    resp, _ = api_versions.RESPONSE_DECODERS[version](body, 0)
    return resp


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("apache-kafka-java", "4.4.0"),
        ("librdkafka", "2.3.0"),
        ("a", "1"),
        ("x.y-z", "0-SNAPSHOT.1"),
    ],
)
def test_a_valid_software_name_and_version_get_the_table(name: str, version: str) -> None:
    resp = _ask(3, name, version)
    assert resp.error_code == 0
    assert any(k.api_key == api_versions.API_KEY for k in resp.api_keys)


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("", ""),
        ("bad name!", "1.0"),
        ("kgc", "1.0 beta"),
        ("-lead", "1"),
        ("trail.", "1"),
        ("ok", ""),
    ],
)
@pytest.mark.parametrize("api_version", [3, 4])
def test_an_invalid_software_name_or_version_is_invalid_request_with_no_table(
    name: str, version: str, api_version: int
) -> None:
    resp = _ask(api_version, name, version)
    assert (resp.error_code, resp.api_keys) == (ErrorCode.INVALID_REQUEST, [])


def test_versions_before_3_carry_no_software_name_and_are_not_checked() -> None:
    for v in (0, 1, 2):
        assert _ask(v, "", "").error_code == 0


@pytest.mark.parametrize("version", [3, 4])
def test_transaction_version_2_is_a_finalized_feature_only_when_set(version: int) -> None:
    """The Java client turns TV2 on when FinalizedFeatures hold transaction.version >= 2 at
    an epoch newer than it knew; kgc lists the feature only when it finalizes 2."""
    request = api_versions.ApiVersionsRequest(
        client_software_name="apache-kafka-java", client_software_version="4.4.0"
    )
    header = RequestHeader(api_versions.API_KEY, version, 1, "t")
    answers = {}
    for tv in (1, 2):
        body = dispatcher(transaction_version=tv).api_versions(header, request, CLIENT)
        answers[tv], _ = api_versions.RESPONSE_DECODERS[version](body, 0)
    assert (answers[1].supported_features, answers[1].finalized_features) == ([], [])
    assert answers[1].finalized_features_epoch == -1
    tv2 = answers[2]
    # Below v4 Kafka leaves out supported ranges starting at 0 (KIP-1022).
    assert [(f.name, f.min_version, f.max_version) for f in tv2.supported_features] == (
        [("transaction.version", 0, 2)] if version >= 4 else []
    )
    assert [(f.name, f.min_version_level, f.max_version_level) for f in tv2.finalized_features] == [
        ("transaction.version", 2, 2)
    ]
    assert tv2.finalized_features_epoch >= 0


@pytest.mark.parametrize("version", [3, 4])
def test_share_version_2_is_finalized_where_share_groups_are_served(version: int) -> None:
    """Kafka 4.4 finalizes share.version 2 (supported 0-2); kgc lists it where it
    advertises ShareGroupHeartbeat, beside transaction.version when that is 2."""
    request = api_versions.ApiVersionsRequest(
        client_software_name="apache-kafka-java", client_software_version="4.4.0"
    )
    header = RequestHeader(api_versions.API_KEY, version, 1, "t")

    def answer(transaction_version: int) -> api_versions.ApiVersionsResponse:
        table = {share_group_heartbeat.API_KEY: lambda *a: b""}
        dispatch = dispatcher(table, transaction_version=transaction_version)  # type: ignore[arg-type]
        resp, _ = api_versions.RESPONSE_DECODERS[version](
            dispatch.api_versions(header, request, CLIENT), 0
        )
        return resp

    for tv, names in ((1, ["share.version"]), (2, ["share.version", "transaction.version"])):
        resp = answer(tv)
        levels = [
            (f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features
        ]
        assert levels == [(n, 2, 2) for n in names]
        ranges = [(f.name, f.min_version, f.max_version) for f in resp.supported_features]
        assert ranges == ([(n, 0, 2) for n in names] if version >= 4 else [])
        assert resp.finalized_features_epoch == 1
