"""Dispatch: which handler answers which API, and the versions kgc advertises.

How this works: the ``Dispatcher`` is built once, from the handler tables of the parts
that answer requests (the broker's cluster APIs, the group runtime, the data plane); an
API key may have one handler only. It advertises exactly the APIs that have a handler,
at the versions of ``apis.SUPPORTED``, and answers ApiVersions itself from that table. The
transport looks each request's API key up in ``supported`` (a key or version outside it
closes the connection, as Kafka does) and calls ``handlers[key]``.

A listener that requires authentication (SASL) will narrow what is dispatched before the
handshake; that check belongs here, between the transport and the handlers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from coordinator.server.apis import SUPPORTED
from coordinator.server.handler import ClientInfo, Handler
from protocol.errors import ErrorCode
from protocol.framing import API_VERSIONS_KEY, RequestHeader, encode_body, encode_response
from protocol.messages.api_versions import ApiVersion, ApiVersionsResponse

Supported = dict[int, tuple[int, int]]

# KIP-511: from v3 the client names its software and version; Kafka answers INVALID_REQUEST
# (and no table) unless both match this pattern (ApiVersionsRequest.isValid).
SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class Dispatcher:
    def __init__(self, *tables: Mapping[int, Handler]) -> None:
        handlers: dict[int, Handler] = {API_VERSIONS_KEY: self.api_versions}
        for table in tables:
            for key, handler in table.items():
                if key in handlers:
                    raise ValueError(f"api key {key} has two handlers")
                handlers[key] = handler
        # Advertise exactly what has a handler.
        self.supported: Supported = {k: v for k, v in SUPPORTED.items() if k in handlers}
        # (api key << 16 | version) -> handler, for every supported version: the transport's
        # one lookup per request (the version check and the handler at once). Rebuilt
        # whenever ``handlers`` is replaced (the authorizer wraps them after this).
        self.routes: dict[int, Handler] = {}
        self.handlers = handlers
        self._api_versions: dict[int, bytes] = {}  # encoded bodies by version

    @property
    def handlers(self) -> dict[int, Handler]:
        return self._handlers

    @handlers.setter
    def handlers(self, handlers: dict[int, Handler]) -> None:
        self._handlers = handlers
        routes = {
            (k << 16) | v: handlers[k]
            for k, (lo, hi) in self.supported.items()
            for v in range(lo, hi + 1)
        }
        # In place: connections hold this dict.
        self.routes.clear()
        self.routes.update(routes)

    def api_versions(self, header: RequestHeader, req: Any, client: ClientInfo) -> bytes:
        if header.api_version >= 3 and not (
            SOFTWARE_NAME_VERSION.fullmatch(req.client_software_name)
            and SOFTWARE_NAME_VERSION.fullmatch(req.client_software_version)
        ):
            return encode_body(
                API_VERSIONS_KEY,
                header.api_version,
                ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[]),
            )
        cached = self._api_versions.get(header.api_version)
        if cached is None:
            keys = [
                ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.supported.items())
            ]
            body = ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
            cached = self._api_versions[header.api_version] = encode_body(
                API_VERSIONS_KEY, header.api_version, body
            )
        return cached

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """The response frame to an ApiVersions at a version we cannot parse.

        Kafka answers it with a v0 response carrying UNSUPPORTED_VERSION and its own
        ApiVersions range, so the client can retry lower.
        """
        lo, hi = self.supported[API_VERSIONS_KEY]
        body = ApiVersionsResponse(
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            api_keys=[ApiVersion(api_key=API_VERSIONS_KEY, min_version=lo, max_version=hi)],
        )
        return encode_response(API_VERSIONS_KEY, 0, correlation_id, body)
