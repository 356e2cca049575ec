"""Dispatch: the route of every request, from its API key and version to its handler.

How this works: the ``Dispatcher`` is given the handlers and the version range of each API
served (``coordinator/apis`` builds both from its table, ApiVersions among them). Its
``routes`` map ``(api key << 16) | version`` to the handler, for every supported version:
the transport's one dict lookup per request checks the version and finds the handler at
once; a key or version outside it closes the connection, as Kafka does. The only answer
made here is the one to an ApiVersions at a version kgc cannot parse, which the transport
sends before decoding anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.server.handler import Handler
from protocol.errors import ErrorCode
from protocol.framing import API_VERSIONS_KEY, encode_response
from protocol.messages.api_versions import ApiVersion, ApiVersionsResponse

Supported = dict[int, tuple[int, int]]


class Dispatcher:
    def __init__(
        self, handlers: Mapping[int, Handler], supported: Mapping[int, tuple[int, int]]
    ) -> None:
        if set(handlers) != set(supported):
            raise ValueError(
                f"handlers {sorted(handlers)} and supported versions {sorted(supported)} differ"
            )
        if API_VERSIONS_KEY not in handlers:
            raise ValueError("no ApiVersions handler")
        self.handlers: dict[int, Handler] = dict(handlers)
        self.supported: Supported = dict(supported)
        # (api key << 16 | version) -> handler: connections hold this dict.
        self.routes: dict[int, Handler] = {
            (k << 16) | v: handlers[k]
            for k, (lo, hi) in self.supported.items()
            for v in range(lo, hi + 1)
        }
        # The SASL gate answers ApiVersions before authentication with it.
        self.api_versions: Handler = handlers[API_VERSIONS_KEY]

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
