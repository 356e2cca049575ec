"""The API table: every API kgc serves has its versions, its handler, its whole-request
error shape and Kafka's authorization decision, and nothing outside it is served."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest

from coordinator.apis import (
    API_TABLE,
    SUPPORTED,
    Parts,
    authorized,
    before_authentication,
    build,
    dispatcher,
    handlers,
)
from coordinator.apis.authorize import ApiAuthorizer
from coordinator.security.acl import AclOperation, Authorizer, ResourceType
from coordinator.server.handler import ClientInfo
from protocol.error_responses import COORDINATOR_KEYS, ERROR_RESPONSES, error_response
from protocol.errors import ErrorCode
from protocol.framing import API_VERSIONS_KEY, RequestHeader, encode_body
from protocol.messages import BY_KEY, sasl_authenticate, sasl_handshake

CODE = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _sample(cls: type) -> Any:
    """An instance of a generated request class with one entry in every list."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
            hint = args[0]
        if typing.get_origin(hint) is list:
            (item,) = typing.get_args(hint)
            if dataclasses.is_dataclass(item):
                values[f.name] = [_sample(item)]  # type: ignore[arg-type]
            elif item is str:
                values[f.name] = ["x"]
            elif item is int:
                values[f.name] = [0]
    return cls(**values)


def _codes(obj: Any) -> set[int]:
    """Every error code anywhere in a decoded response."""
    found: set[int] = set()
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name == "error_code" or f.name.endswith("_error_code"):
                found.add(value)
            found |= _codes(value)
    elif isinstance(obj, list):
        for x in obj:
            found |= _codes(x)
    return found


def test_every_api_has_versions_the_protocol_knows() -> None:
    for key, api in API_TABLE.items():
        lo, hi = api.versions
        assert 0 <= lo <= hi, key
        assert set(range(lo, hi + 1)) <= set(BY_KEY[key].REQUEST_DECODERS), key
    assert {k: a.versions for k, a in API_TABLE.items()} == SUPPORTED


def test_every_api_but_api_versions_names_its_handler() -> None:
    assert [k for k, a in API_TABLE.items() if a.handler is None] == [API_VERSIONS_KEY]


def test_start_up_fails_when_an_advertised_api_has_no_handler() -> None:
    with pytest.raises(ValueError, match="without a handler") as refused:
        build(Parts())
    missing = str(refused.value)
    assert str(sasl_handshake.API_KEY) in missing  # nothing answers, not even SASL
    assert handlers(Parts()) == {}


def test_every_api_has_its_whole_request_error_shape() -> None:
    assert set(ERROR_RESPONSES) == set(API_TABLE)
    assert set(API_TABLE) >= COORDINATOR_KEYS
    for key, api in API_TABLE.items():
        mod = BY_KEY[key]
        req = _sample(mod.Request)
        lo, hi = api.versions
        for version in range(lo, hi + 1):
            resp = error_response(key, version, req, CODE)
            assert type(resp) is mod.Response, (key, version)
            body = encode_body(key, version, resp)
            decoded, _ = mod.RESPONSE_DECODERS[version](body, 0)
            if (key, version) in ((35, 1), (35, 2)):  # DescribeLogDirs: no code before v3
                continue
            assert CODE in _codes(decoded), (key, version)


def test_error_response_refuses_an_unknown_api() -> None:
    with pytest.raises(ValueError, match="9999"):
        error_response(9999, 0, None, CODE)


def test_every_api_has_kafkas_authorization_decision() -> None:
    unauthenticated = {API_VERSIONS_KEY, sasl_handshake.API_KEY, sasl_authenticate.API_KEY}
    for key, api in API_TABLE.items():
        if key in unauthenticated:
            assert api.acl == () and api.authorize is before_authentication, key
            continue
        assert api.acl and api.authorize is not before_authentication, key
        for decision in api.acl:
            operation, resource = decision.split()
            assert operation in AclOperation.__members__, (key, decision)
            assert resource in ResourceType.__members__, (key, decision)


def test_with_an_authorizer_every_api_is_bound_to_its_check() -> None:
    def stand_in(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return BY_KEY[header.api_key].Response()

    table = {key: stand_in for key in API_TABLE if key != API_VERSIONS_KEY}
    bound = authorized(ApiAuthorizer(Authorizer([])), table)
    for key in table:
        checked = API_TABLE[key].authorize is not before_authentication
        assert (bound[key] is not stand_in) == checked, key


def test_only_the_table_is_served() -> None:
    def stand_in(header: RequestHeader, req: Any, client: ClientInfo) -> Any:
        return None

    dispatch = dispatcher({key: stand_in for key in API_TABLE if key != API_VERSIONS_KEY})
    assert dispatch.supported == SUPPORTED
    expected = {(k << 16) | v for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)}
    # An unknown key, or a version outside the range, has no route: the transport closes
    # the connection, as Kafka does (tests/server/test_bad_input.py sends them).
    assert set(dispatch.routes) == expected
    with pytest.raises(ValueError, match="two handlers"):
        dispatcher({API_VERSIONS_KEY: stand_in})
