"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) v1-3, as Kafka answers them.

How this works: the handlers read and change the ACL store (``acl_store``); the authorizer
picks the change up through the store's ``on_change``. As Kafka's AclApis:

* each API first checks the caller on the CLUSTER resource: DESCRIBE for DescribeAcls,
  ALTER for CreateAcls and DeleteAcls. A refusal is answered as Kafka's getErrorResponse
  does: DescribeAcls with a top-level CLUSTER_AUTHORIZATION_FAILED, CreateAcls/DeleteAcls
  with that code for every creation/filter;
* without an authorizer (``authorizer.class.name`` empty) every answer is
  SECURITY_DISABLED ("No Authorizer is configured.");
* a request naming UNKNOWN's code (0) as resource type, pattern type, operation or
  permission type fails to parse in Kafka, which closes the connection; so does kgc (one
  WARNING line). A number outside the enums reads as UNKNOWN and is answered, as Kafka 4.4
  does: CreateAcls refuses that creation, DescribeAcls matches nothing, DeleteAcls refuses
  that filter;
* CreateAcls validates each binding on its own (``acl.binding_error``: the CLUSTER
  resource's one name, empty names, ANY/MATCH where a concrete value is needed, a principal
  that is not ``Type:name``) and answers INVALID_REQUEST with Kafka's message for the bad
  ones; the valid ones are stored together, in one durable change. Creating a binding
  that exists succeeds and changes nothing;
* DescribeAcls answers every binding the filter matches, grouped by resource pattern;
* DeleteAcls matches every filter against the same set (the one before the request), deletes
  all matches in one durable change and lists, per filter, the bindings it matched.

A store that cannot be written (cluster mode: the database is away) answers
UNKNOWN_SERVER_ERROR for each creation or filter; the change may or may not have been
committed, and both operations may be retried safely (create is idempotent; a repeated
delete finds nothing more).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    DenialCallback,
    PatternType,
    ResourceType,
    binding_error,
    filter_error,
    parse_super_users,
)
from coordinator.security.acl_store import AclStore
from coordinator.server.handler import CLOSE_CONNECTION, ClientInfo, Deferred, Outcome
from protocol.errors import ErrorCode
from protocol.framing import RequestHeader
from protocol.messages.create_acls import (
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
)
from protocol.messages.delete_acls import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from protocol.messages.describe_acls import (
    AclDescription,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
)

if TYPE_CHECKING:
    from coordinator.config import Settings

__all__ = ["AclAdmin", "acl_security", "log_denial"]

log = logging.getLogger("kgc.acl")

NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
CLUSTER_DENIED = "Cluster authorization failed."
STORE_FAILED = "the ACL change could not be stored; it may or may not have been applied"


def _known(resource_type: int, pattern_type: int, operation: int, permission_type: int) -> bool:
    """Whether Kafka 4.4 would parse these codes: none of them UNKNOWN's own code, 0. (A code
    outside an enum reads as UNKNOWN without failing the parse, and is answered.)"""
    return 0 not in (resource_type, pattern_type, operation, permission_type)


# DescribeAcls with a filter naming an UNKNOWN element: Kafka 4.4 matches nothing and
# answers success (with an empty message, as every success).
_UNKNOWN_FILTER_MESSAGE = ""


class AclAdmin:
    """The ACL APIs over one store and the authorizer that enforces it.

    ``store`` and ``authorizer`` are both None when kgc runs without an authorizer.
    """

    def __init__(self, store: AclStore | None, authorizer: Authorizer | None) -> None:
        self.store = store
        self.authorizer = authorizer

    def _cluster_allowed(self, client: ClientInfo, operation: AclOperation) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(
            client.principal, client.host, operation, ResourceType.CLUSTER, CLUSTER_NAME
        )

    @staticmethod
    def _unparsable(api: str, client: ClientInfo) -> Outcome:
        log.warning(
            "closing connection %d from %s:%d: %s request contains UNKNOWN elements",
            client.conn_id,
            client.host,
            client.port,
            api,
        )
        return CLOSE_CONNECTION

    # -- CreateAcls

    def create_acls(
        self, header: RequestHeader, req: CreateAclsRequest, client: ClientInfo
    ) -> CreateAclsResponse | Deferred | Outcome:
        if not all(
            _known(
                c.resource_type,
                c.resource_pattern_type,
                c.operation,
                c.permission_type,
            )
            for c in req.creations
        ):
            return self._unparsable("CreateAcls", client)
        if not self._cluster_allowed(client, AclOperation.ALTER):
            return _create_error(
                len(req.creations), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
            )
        if self.store is None:
            return _create_error(len(req.creations), ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        bindings = [
            AclBinding(
                ResourceType.from_code(c.resource_type),
                c.resource_name,
                PatternType.from_code(c.resource_pattern_type),
                c.principal,
                c.host,
                AclOperation.from_code(c.operation),
                AclPermissionType.from_code(c.permission_type),
            )
            for c in req.creations
        ]
        errors = [binding_error(b) for b in bindings]
        valid = [b for b, why in zip(bindings, errors, strict=True) if why is None]
        results = [
            AclCreationResult(error_code=0)
            if why is None
            else AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
            for why in errors
        ]
        if not valid:
            return CreateAclsResponse(results=results)
        return Deferred.task(self._create(valid, errors, results))

    async def _create(
        self,
        valid: list[AclBinding],
        errors: list[str | None],
        results: list[AclCreationResult],
    ) -> CreateAclsResponse:
        assert self.store is not None
        try:
            await self.store.create(valid)
        except Exception as exc:
            log.warning("CreateAcls: storing %d ACL(s) failed: %r", len(valid), exc)
            for i, why in enumerate(errors):
                if why is None:
                    results[i] = AclCreationResult(
                        error_code=ErrorCode.UNKNOWN, error_message=STORE_FAILED
                    )
        else:
            for b in valid:
                log.info("created ACL %s", b)
        return CreateAclsResponse(results=results)

    # -- DescribeAcls

    def describe_acls(
        self, header: RequestHeader, req: DescribeAclsRequest, client: ClientInfo
    ) -> DescribeAclsResponse | Outcome:
        if not _known(
            req.resource_type_filter,
            req.pattern_type_filter,
            req.operation,
            req.permission_type,
        ):
            return self._unparsable("DescribeAcls", client)
        if not self._cluster_allowed(client, AclOperation.DESCRIBE):
            return DescribeAclsResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED
            )
        if self.store is None:
            return DescribeAclsResponse(
                error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER_DESCRIBE
            )
        acl_filter = AclBindingFilter(
            ResourceType.from_code(req.resource_type_filter),
            req.resource_name_filter,
            PatternType.from_code(req.pattern_type_filter),
            req.principal_filter,
            req.host_filter,
            AclOperation.from_code(req.operation),
            AclPermissionType.from_code(req.permission_type),
        )
        if filter_error(acl_filter) is not None:
            return DescribeAclsResponse(error_code=0, error_message=_UNKNOWN_FILTER_MESSAGE)
        matched = [b for b in self.store.bindings if acl_filter.matches(b)]
        # Kafka 4.4 answers an empty message, not null.
        return DescribeAclsResponse(error_code=0, error_message="", resources=_resources(matched))

    # -- DeleteAcls

    def delete_acls(
        self, header: RequestHeader, req: DeleteAclsRequest, client: ClientInfo
    ) -> DeleteAclsResponse | Deferred | Outcome:
        if not all(
            _known(
                f.resource_type_filter,
                f.pattern_type_filter,
                f.operation,
                f.permission_type,
            )
            for f in req.filters
        ):
            return self._unparsable("DeleteAcls", client)
        if not self._cluster_allowed(client, AclOperation.ALTER):
            return _delete_error(
                len(req.filters), ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED
            )
        if self.store is None:
            return _delete_error(len(req.filters), ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        filters = [
            AclBindingFilter(
                ResourceType.from_code(f.resource_type_filter),
                f.resource_name_filter,
                PatternType.from_code(f.pattern_type_filter),
                f.principal_filter,
                f.host_filter,
                AclOperation.from_code(f.operation),
                AclPermissionType.from_code(f.permission_type),
            )
            for f in req.filters
        ]
        return Deferred.task(self._delete(filters))

    async def _delete(self, filters: list[AclBindingFilter]) -> DeleteAclsResponse:
        assert self.store is not None
        errors = [filter_error(f) for f in filters]
        valid = [f for f, why in zip(filters, errors, strict=True) if why is None]
        try:
            matched = iter(await self.store.delete(valid)) if valid else iter(())
        except Exception as exc:
            log.warning("DeleteAcls: deleting by %d filter(s) failed: %r", len(valid), exc)
            return _delete_error(len(filters), ErrorCode.UNKNOWN, STORE_FAILED)
        results = []
        for why in errors:
            if why is not None:
                results.append(
                    DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=why)
                )
                continue
            found = next(matched)
            for b in found:
                log.info("deleted ACL %s", b)
            results.append(
                DeleteAclsFilterResult(
                    error_code=0,
                    error_message=None,
                    matching_acls=[
                        DeleteAclsMatchingAcl(
                            error_code=0,
                            error_message=None,
                            resource_type=b.resource_type,
                            resource_name=b.resource_name,
                            pattern_type=b.pattern_type,
                            principal=b.principal,
                            host=b.host,
                            operation=b.operation,
                            permission_type=b.permission_type,
                        )
                        for b in found
                    ],
                )
            )
        return DeleteAclsResponse(filter_results=results)


def _create_error(n: int, code: int, message: str) -> CreateAclsResponse:
    return CreateAclsResponse(
        results=[AclCreationResult(error_code=code, error_message=message) for _ in range(n)]
    )


def _delete_error(n: int, code: int, message: str) -> DeleteAclsResponse:
    return DeleteAclsResponse(
        filter_results=[
            DeleteAclsFilterResult(error_code=code, error_message=message) for _ in range(n)
        ]
    )


def _resources(bindings: Sequence[AclBinding]) -> list[DescribeAclsResource]:
    """Bindings grouped by resource pattern (DescribeAclsResponse.aclsResources)."""
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclDescription]] = {}
    for b in sorted(
        bindings,
        key=lambda b: (
            b.resource_type,
            b.resource_name,
            b.pattern_type,
            b.principal,
            b.host,
            b.operation,
            b.permission_type,
        ),
    ):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
            AclDescription(
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission_type,
            )
        )
    return [
        DescribeAclsResource(resource_type=rt, resource_name=name, pattern_type=pt, acls=acls)
        for (rt, name, pt), acls in grouped.items()
    ]


audit_log = logging.getLogger("kgc.authorizer")

_RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


def log_denial(
    principal: KafkaPrincipal,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    resource_name: str,
) -> None:
    """A denial on ``kgc.authorizer``, worded as Kafka's authorizer log words it."""
    audit_log.info(
        "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
        principal,
        operation.name,
        host,
        _RESOURCE_NAMES.get(resource_type, resource_type.name),
        resource_name,
    )


def acl_security(
    settings: Settings,
    store: AclStore | None,
    on_denied: DenialCallback | None = log_denial,
) -> AclAdmin:
    """The authorizer ``settings`` ask for over ``store`` (None without
    ``authorizer.class.name``), kept up to date with the store, and the ACL APIs over both.

    ``on_denied`` is told every audited denial (default: a line on ``kgc.authorizer``;
    the caller may wrap it to count denials too).
    """
    if not settings.authorizer_class_name or store is None:
        return AclAdmin(None, None)
    authorizer = Authorizer(
        store.bindings,
        super_users=parse_super_users(settings.super_users),
        allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
        on_denied=on_denied,
    )
    store.on_change.append(authorizer.update)
    log.info(
        "authorizer %s: %d ACL(s), %d super user(s), allow.everyone.if.no.acl.found=%s",
        settings.authorizer_class_name,
        len(store.bindings),
        len(authorizer.super_users),
        str(settings.allow_everyone_if_no_acl_found).lower(),
    )
    return AclAdmin(store, authorizer)
