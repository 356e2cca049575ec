"""Kafka's ACL model and the authorizer that applies it (StandardAuthorizer's semantics).

How this works: an ACL binding says "principal P, from host H, is ALLOWed (or DENYed)
operation O on the resources matching a pattern" (``AclBinding``). A pattern is a resource
type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, ...), a name and a pattern type: LITERAL
(exactly that name; the name ``*`` matches every resource of the type) or PREFIXED (every
name starting with it). The enums carry Kafka's numeric codes, which are what the wire and
the stores hold.

``Authorizer.authorize(principal, host, operation, resource_type, name)`` decides as
Kafka's ``StandardAuthorizerData.authorize`` does:

1. a principal listed in ``super.users`` may do anything;
2. the bindings whose pattern matches the resource are collected (LITERAL with that name,
   LITERAL ``*``, PREFIXED with a prefix of the name). Of those, a binding applies when its
   principal is the caller's or ``User:*``, its host is the caller's address or ``*``, and
   its operation is the one asked, ``ALL``, or (for ALLOW bindings only) one that implies
   it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
   DESCRIBE_CONFIGS. A DENY binding never implies anything (DENY READ does not deny
   DESCRIBE);
3. any applying DENY denies, whatever ALLOWs apply; else any applying ALLOW allows;
4. no binding applies: denied when some binding matches the resource (for others, or for
   other operations), else ``allow.everyone.if.no.acl.found`` decides (default: denied).

Speed (authorization sits on the heartbeat path): the bindings are indexed by resource
type and name: LITERAL names in a dict (one O(1) look-up, plus the type's ``*`` entry),
PREFIXED names in a dict per type probed only at the lengths some prefix has (a handful of
look-ups of the name's prefixes, not a scan of the bindings). Under each pattern the
bindings are grouped by principal string, so a caller's candidates are two dict look-ups
(its own principal and ``User:*``). Decisions are memoised per (principal, host,
operation, resource) until the bindings change (``update``), so a member heartbeating
every few seconds costs one dict hit.

Denials of checks made for a request (``audit=True``, Kafka's ``logIfDenied``) are handed
to ``on_denied(principal, host, operation, resource_type, resource_name)``: the caller logs
them on ``kgc.authorizer`` and counts them. Checks made only to compute
``authorized_operations`` (DescribeGroups, Metadata) are not reported, as in Kafka.

How the enforcing code uses it (``authorizer`` is None when ``authorizer.class.name`` is
empty: everything is allowed and ``authorized_operations`` is every supported operation,
see ``all_operations``)::

    if not authorizer.authorize(client.principal, client.host, AclOperation.READ,
                                ResourceType.GROUP, group_id):
        ... GROUP_AUTHORIZATION_FAILED
    ops = authorizer.authorized_operations(client.principal, client.host,
                                           ResourceType.GROUP, group_id)

Hosts are compared as strings with the client's address (``ClientInfo.host``, e.g.
``127.0.0.1``), as Kafka compares ``InetAddress.getHostAddress()``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coordinator.security import KafkaPrincipal

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "DenialCallback",
    "PatternType",
    "ResourceType",
    "all_operations",
    "binding_error",
    "filter_error",
    "parse_super_users",
    "principal_error",
    "supported_operations",
]


class ResourceType(enum.IntEnum):
    """org.apache.kafka.common.resource.ResourceType (codes as on the wire)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @classmethod
    def from_code(cls, code: int) -> ResourceType:
        """The member with ``code``, UNKNOWN for a code Kafka does not define (fromCode)."""
        return _RESOURCE_TYPES.get(code, cls.UNKNOWN)


class PatternType(enum.IntEnum):
    """org.apache.kafka.common.resource.PatternType. ANY and MATCH exist only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def from_code(cls, code: int) -> PatternType:
        return _PATTERN_TYPES.get(code, cls.UNKNOWN)


class AclOperation(enum.IntEnum):
    """org.apache.kafka.common.acl.AclOperation. ANY exists only in filters."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939 (Kafka 4.1)

    @classmethod
    def from_code(cls, code: int) -> AclOperation:
        return _OPERATIONS.get(code, cls.UNKNOWN)


class AclPermissionType(enum.IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType. ANY exists only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @classmethod
    def from_code(cls, code: int) -> AclPermissionType:
        return _PERMISSIONS.get(code, cls.UNKNOWN)


_RESOURCE_TYPES = {m.value: m for m in ResourceType}
_PATTERN_TYPES = {m.value: m for m in PatternType}
_OPERATIONS = {m.value: m for m in AclOperation}
_PERMISSIONS = {m.value: m for m in AclPermissionType}

WILDCARD = "*"  # a LITERAL resource name or an ACL host matching any
WILDCARD_PRINCIPAL = "User:*"  # an ACL principal matching any principal
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource

_O = AclOperation
# AclEntry.supportedOperations: what authorized_operations reports, per resource type.
_SUPPORTED: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        _O.READ,
        _O.WRITE,
        _O.CREATE,
        _O.DELETE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (_O.READ, _O.DELETE, _O.DESCRIBE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        _O.CREATE,
        _O.ALTER,
        _O.DESCRIBE,
        _O.CLUSTER_ACTION,
        _O.DESCRIBE_CONFIGS,
        _O.ALTER_CONFIGS,
        _O.IDEMPOTENT_WRITE,
    ),
    ResourceType.TRANSACTIONAL_ID: (_O.WRITE, _O.DESCRIBE, _O.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}
# ALLOW bindings of these operations also allow the key (StandardAuthorizerData).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    _O.DESCRIBE: frozenset((_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER)),
    _O.DESCRIBE_CONFIGS: frozenset((_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS)),
}


def supported_operations(resource_type: ResourceType) -> tuple[AclOperation, ...]:
    """The operations Kafka reports in ``authorized_operations`` for a resource type."""
    return _SUPPORTED.get(resource_type, ())


def all_operations(resource_type: ResourceType) -> int:
    """The ``authorized_operations`` bitfield without an authorizer: every supported one."""
    return _bits(supported_operations(resource_type))


def _bits(ops: Iterable[AclOperation]) -> int:
    out = 0
    for op in ops:
        out |= 1 << op.value
    return out


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", "User:*"
    host: str  # an address, or "*"
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(pattern=ResourcePattern(resourceType={self.resource_type.name}, "
            f"name={self.resource_name}, patternType={self.pattern_type.name}), "
            f"entry=(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission_type.name}))"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings DescribeAcls/DeleteAcls mean (Kafka's AclBindingFilter).

    ``None`` for a name, principal or host matches any; ANY for an enum matches any. The
    pattern type ANY matches bindings of any pattern type *with exactly this name*; MATCH
    matches the bindings that would apply to a resource of this name: LITERAL with the
    name, LITERAL ``*`` and PREFIXED with a prefix of it.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def is_unknown(self) -> bool:
        return (
            self.resource_type is ResourceType.UNKNOWN
            or self.pattern_type is PatternType.UNKNOWN
            or self.operation is AclOperation.UNKNOWN
            or self.permission_type is AclPermissionType.UNKNOWN
        )

    def matches(self, b: AclBinding) -> bool:
        """ResourcePatternFilter.matches and AccessControlEntryFilter.matches."""
        if self.resource_type is not ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != b.pattern_type:
            return False
        name = self.resource_name
        if name is not None:
            if pt is PatternType.ANY or pt == b.pattern_type:
                if name != b.resource_name:
                    return False
            elif b.pattern_type is PatternType.LITERAL:  # MATCH
                if name != b.resource_name and b.resource_name != WILDCARD:
                    return False
            elif b.pattern_type is PatternType.PREFIXED:
                if not name.startswith(b.resource_name):
                    return False
            else:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != b.operation:
            return False
        return (
            self.permission_type is AclPermissionType.ANY
            or self.permission_type == b.permission_type
        )


ANY_FILTER = AclBindingFilter()


def principal_error(principal: str) -> str | None:
    """Why ``principal`` is not ``Type:name`` (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    kind, sep, _name = principal.partition(":")
    if not sep or not kind:
        return "expected a string in format principalType:principalName but got " + principal
    return None


def binding_error(b: AclBinding) -> str | None:
    """Why CreateAcls refuses ``b`` (INVALID_REQUEST), or None.

    The checks of Kafka 4.4's AclApis.handleCreateAcls and AclControlManager.validateNewAcl,
    in their order, with their messages (the principal needs its colon; its type may be
    empty, as Kafka accepts).
    """
    if b.resource_type is ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is " + CLUSTER_NAME
    if not b.resource_name:
        return "Invalid empty resource name"
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {b.resource_type.name}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {b.pattern_type.name}"
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {b.operation.name}"
    if b.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return f"Invalid permissionType {b.permission_type.name}"
    if ":" not in b.principal:
        return (
            f"Could not parse principal from `{b.principal}` (no colon is present separating "
            "the principal type from the principal name)"
        )
    if not b.host:
        return "Host pattern cannot be null or empty"
    return None


def filter_error(f: AclBindingFilter) -> str | None:
    """Why DeleteAcls refuses a filter (AclControlManager.validateFilter), or None."""
    if f.resource_type is ResourceType.UNKNOWN or f.pattern_type is PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if f.operation is AclOperation.UNKNOWN or f.permission_type is AclPermissionType.UNKNOWN:
        return "Unknown entryFilter."
    return None


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users`` ("User:alice;User:bob") as principal strings; ValueError if malformed."""
    out: set[str] = set()
    for part in value.split(";"):
        text = part.strip()
        if not text:
            continue
        why = principal_error(text)
        if why is not None:
            raise ValueError(f"super.users: {why}")
        kind, _, name = text.partition(":")
        out.add(f"{kind}:{name}")
    return frozenset(out)


# (principal, host, operation, resource type, resource name)
DenialCallback = Callable[[KafkaPrincipal, str, AclOperation, ResourceType, str], None]

# An entry under one resource pattern and one principal: (host, operation, permission).
_Entry = tuple[str, AclOperation, AclPermissionType]
# Under one resource pattern: principal string -> its entries.
_ByPrincipal = dict[str, tuple[_Entry, ...]]

_CACHE_LIMIT = 1 << 16


class Authorizer:
    """Decides requests against a set of ACL bindings (see the module doc)."""

    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        on_denied: DenialCallback | None = None,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.on_denied = on_denied
        self._bindings: frozenset[AclBinding] = frozenset()
        # (type, literal name) -> by principal; the type's "*" is one such name.
        self._literal: dict[tuple[ResourceType, str], _ByPrincipal] = {}
        # type -> prefix -> by principal; type -> the distinct prefix lengths, ascending.
        self._prefixed: dict[ResourceType, dict[str, _ByPrincipal]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._cache: dict[tuple[KafkaPrincipal, str, AclOperation, ResourceType, str], bool] = {}
        # Bumped by every update: decisions memoized elsewhere (per connection, on the
        # heartbeat path) are valid only while it holds.
        self.epoch = 0
        self.update(bindings)

    # -- the bindings

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    def update(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every binding (the store calls this whenever its ACLs change)."""
        snapshot = frozenset(bindings)
        grouped: dict[tuple[ResourceType, str, PatternType], dict[str, list[_Entry]]] = {}
        for b in snapshot:
            key = (b.resource_type, b.resource_name, b.pattern_type)
            grouped.setdefault(key, {}).setdefault(b.principal, []).append(
                (b.host, b.operation, b.permission_type)
            )
        literal: dict[tuple[ResourceType, str], _ByPrincipal] = {}
        prefixed: dict[ResourceType, dict[str, _ByPrincipal]] = {}
        for (rtype, name, ptype), by_principal in grouped.items():
            frozen = {p: tuple(entries) for p, entries in by_principal.items()}
            if ptype is PatternType.LITERAL:
                literal[(rtype, name)] = frozen
            elif ptype is PatternType.PREFIXED:
                prefixed.setdefault(rtype, {})[name] = frozen
        # Swap whole structures: a check running between two statements sees old or new.
        self._literal = literal
        self._prefixed = prefixed
        self._prefix_lengths = {
            rtype: tuple(sorted({len(p) for p in names})) for rtype, names in prefixed.items()
        }
        self._bindings = snapshot
        self._cache = {}
        self.epoch += 1

    def acls(self, acl_filter: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """The bindings ``acl_filter`` matches (DescribeAcls)."""
        return [b for b in self._bindings if acl_filter.matches(b)]

    # -- decisions

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
        *,
        audit: bool = True,
    ) -> bool:
        """May ``principal``, connected from ``host``, do ``operation`` on the resource?

        ``audit``: the check is for something the request asked for (a denial is reported
        to ``on_denied``); False for checks that only filter or describe.
        """
        # The principal itself is the key (a tuple): its "User:name" string is only built
        # when the decision is not cached (most checks repeat: every heartbeat).
        key = (principal, host, operation, resource_type, resource_name)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(str(principal), host, operation, resource_type, resource_name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache = {}
            self._cache[key] = allowed
        if not allowed and audit and self.on_denied is not None:
            self.on_denied(principal, host, operation, resource_type, resource_name)
        return allowed

    def authorized_operations(
        self,
        principal: KafkaPrincipal,
        host: str,
        resource_type: ResourceType,
        resource_name: str,
    ) -> int:
        """The ``authorized_operations`` bitfield (bit ``1 << code`` per allowed operation)
        over the operations Kafka reports for the type; denials are not reported."""
        out = 0
        for op in supported_operations(resource_type):
            if self.authorize(principal, host, op, resource_type, resource_name, audit=False):
                out |= 1 << op.value
        return out

    def authorize_by_resource_type(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of the type?

        Kafka's ``Authorizer.authorizeByResourceType`` (used where a request names no
        resource, e.g. an idempotent producer without IDEMPOTENT_WRITE on the cluster):
        allowed when an ALLOW binding (LITERAL or PREFIXED) is not dominated by a DENY
        of the same literal name or of a prefix of it; a DENY of LITERAL ``*`` denies.
        """
        if self.authorize(principal, host, operation, resource_type, "hardcode", audit=False):
            return True  # super users, allow.everyone.if.no.acl.found
        me = str(principal)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        for b in self._bindings:
            if b.resource_type != resource_type:
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            if b.principal != me and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.operation != operation and b.operation is not AclOperation.ALL:
                continue
            literal = b.pattern_type is PatternType.LITERAL
            if b.permission_type is AclPermissionType.DENY:
                if literal and b.resource_name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(b.resource_name)
            elif b.permission_type is AclPermissionType.ALLOW:
                if literal and b.resource_name == WILDCARD:
                    return True
                (allow_literal if literal else allow_prefixed).add(b.resource_name)
        for literal, names in ((True, allow_literal), (False, allow_prefixed)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    return True
        return False

    def _decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        patterns: list[_ByPrincipal] = []
        exact = self._literal.get((resource_type, resource_name))
        if exact is not None:
            patterns.append(exact)
        if resource_name != WILDCARD:
            wildcard = self._literal.get((resource_type, WILDCARD))
            if wildcard is not None:
                patterns.append(wildcard)
        prefixes = self._prefixed.get(resource_type)
        if prefixes is not None:
            for n in self._prefix_lengths[resource_type]:
                if n > len(resource_name):
                    break
                found = prefixes.get(resource_name[:n])
                if found is not None:
                    patterns.append(found)
        if not patterns:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for by_principal in patterns:
            for who in (principal, WILDCARD_PRINCIPAL):
                entries = by_principal.get(who)
                if entries is None:
                    continue
                for entry_host, op, permission in entries:
                    if entry_host != WILDCARD and entry_host != host:
                        continue
                    if permission is AclPermissionType.ALLOW:
                        if op is operation or op is AclOperation.ALL:
                            allowed = True
                        else:
                            implied = _IMPLIED_BY.get(operation)
                            if implied is not None and op in implied:
                                allowed = True
                    elif op is operation or op is AclOperation.ALL:
                        return False  # DENY wins
        # Some binding matches the resource: without an applying ALLOW, denied.
        return allowed
