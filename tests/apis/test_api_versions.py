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


def _features(
    version: int, transaction_version: int, table: dict[int, object] | None = None
) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]], int]:
    """(supported, finalized, epoch) of ApiVersions at ``version``."""
    request = api_versions.ApiVersionsRequest(
        client_software_name="apache-kafka-java", client_software_version="4.4.0"
    )
    header = RequestHeader(api_versions.API_KEY, version, 1, "t")
    dispatch = dispatcher(table or {}, transaction_version=transaction_version)  # type: ignore[arg-type]
    resp, _ = api_versions.RESPONSE_DECODERS[version](
        dispatch.api_versions(header, request, CLIENT), 0
    )
    return (
        [(f.name, f.min_version, f.max_version) for f in resp.supported_features],
        [(f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features],
        resp.finalized_features_epoch,
    )


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("transaction_version", [0, 1, 2])
def test_transaction_version_is_supported_0_to_2_and_finalized_from_1(
    version: int, transaction_version: int
) -> None:
    """Kafka 4.4 formatted at transaction.version 0, 1 and 2 (kafka-storage format --feature
    transaction.version=N), asked ApiVersions v4: supported transaction.version 0-2 every
    time; finalized 1-1 and 2-2 at levels 1 and 2, absent at 0 (a level 0 feature leaves
    Kafka's finalized map). v3 lists no supported range starting at 0 (KIP-1022). The Java
    client turns TV2 on when it sees level >= 2."""
    supported, finalized, epoch = _features(version, transaction_version)
    assert supported == ([("transaction.version", 0, 2)] if version >= 4 else [])
    assert finalized == (
        [("transaction.version", transaction_version, transaction_version)]
        if transaction_version >= 1
        else []
    )
    assert epoch >= 0


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("transaction_version", [0, 1, 2])
def test_share_version_2_is_finalized_where_share_groups_are_served(
    version: int, transaction_version: int
) -> None:
    """Kafka 4.4 finalizes share.version 2 (supported 0-2) beside transaction.version at
    each of its levels; kgc lists it where it advertises ShareGroupHeartbeat."""
    table: dict[int, object] = {share_group_heartbeat.API_KEY: lambda *a: b""}
    supported, finalized, epoch = _features(version, transaction_version, table)
    tv = [("transaction.version", transaction_version, transaction_version)]
    assert finalized == [("share.version", 2, 2)] + (tv if transaction_version >= 1 else [])
    assert supported == (
        [("share.version", 0, 2), ("transaction.version", 0, 2)] if version >= 4 else []
    )
    assert epoch == 1
