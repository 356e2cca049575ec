"""``kgc acls list|add|remove``: Kafka ACLs over the wire, with kafka-acls.sh's options.

How this works: ``add`` sends CreateAcls, ``remove`` DeleteAcls and ``list`` DescribeAcls,
through the tools' admin connection, so it works against kgc and any Kafka broker. The
bindings are built as kafka-acls.sh (AclCommand) builds them: every resource named
(``--topic``, ``--group``, ``--transactional-id``, each repeatable, and ``--cluster``) gets
every combination of ``--allow-principal`` x ``--allow-host`` x ``--operation`` as ALLOW and
``--deny-principal`` x ``--deny-host`` x ``--operation`` as DENY. A host defaults to ``*``
and the operation to ``All``; ``--resource-pattern-type`` (LITERAL by default; PREFIXED;
for list and remove also ANY and MATCH) applies to every resource. ``--consumer`` and
``--producer`` add kafka-acls.sh's convenience sets (READ+DESCRIBE on the topics and READ on
the groups; WRITE+DESCRIBE+CREATE on the topics and WRITE+DESCRIBE on transactional ids).

``remove`` without principals removes every ACL of the resources; it asks for
confirmation on stdin unless ``--force`` (as kafka-acls.sh). ``list`` without resources
lists every ACL; ``--principal`` keeps that principal's. Operation and pattern names are
accepted as Kafka writes them (``Read``, ``DescribeConfigs``) or as constants
(``READ``, ``DESCRIBE_CONFIGS``), in any case.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    principal_error,
    supported_operations,
)
from coordinator.tools.admin import AdminError, check, error_name
from coordinator.tools.commands.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, admin_for, leaf
from coordinator.tools.output import Output, show
from protocol.messages import create_acls, delete_acls, describe_acls

COLUMNS = ["RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]


class UsageError(Exception):
    pass


def _enum_value(text: str, enum: Any, what: str, allowed: list[Any]) -> Any:
    key = text.strip().replace("-", "").replace("_", "").upper()
    for member in allowed:
        if member.name.replace("_", "") == key:
            return member
    names = ", ".join(_pascal(m.name) for m in allowed)
    raise UsageError(f"unknown {what} {text!r} (one of: {names})")


def _pascal(name: str) -> str:
    """DESCRIBE_CONFIGS -> DescribeConfigs (as kafka-acls.sh prints operations)."""
    return "".join(part.capitalize() for part in name.split("_"))


def _operation(text: str) -> AclOperation:
    allowed = [o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)]
    return _enum_value(text, AclOperation, "operation", allowed)  # type: ignore[no-any-return]


def _pattern_type(text: str, *, for_add: bool) -> PatternType:
    allowed = (
        [PatternType.LITERAL, PatternType.PREFIXED]
        if for_add
        else [PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH]
    )
    return _enum_value(text, PatternType, "resource pattern type", allowed)  # type: ignore[no-any-return]


def _principals(values: list[str] | None) -> list[str]:
    out = []
    for v in values or []:
        text = v.strip()
        why = principal_error(text)
        if why is not None:
            raise UsageError(f"bad principal {v!r}: {why}")
        out.append(text)
    return sorted(set(out))


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[tuple[ResourceType, str]]:
    """The resources named on the command line, as kafka-acls.sh collects them."""
    out: list[tuple[ResourceType, str]] = []
    out += [(ResourceType.TOPIC, t.strip()) for t in args.topic or []]
    if args.cluster and pattern is PatternType.LITERAL:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    out += [(ResourceType.GROUP, g.strip()) for g in args.group or []]
    out += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id or []]
    return list(dict.fromkeys(out))


def _entries(
    args: argparse.Namespace, operations: list[AclOperation]
) -> list[tuple[str, str, AclOperation, AclPermissionType]]:
    out = []
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        names = _principals(principals)
        host_list = sorted({h.strip() for h in hosts}) if hosts else ["*"]
        for p in names:
            for op in operations:
                for h in host_list:
                    out.append((p, h, op, permission))
    return out


def _resource_entries(
    args: argparse.Namespace, pattern: PatternType
) -> dict[tuple[ResourceType, str], list[tuple[str, str, AclOperation, AclPermissionType]]]:
    """resource -> entries (getResourceFilterToAcls), with --consumer/--producer sets."""
    resources = _resources(args, pattern)
    out: dict[tuple[ResourceType, str], list[tuple[str, str, AclOperation, AclPermissionType]]]
    out = {}
    if not args.consumer and not args.producer:
        operations = [_operation(o) for o in args.operation or ["All"]]
        for r in resources:
            out[r] = _entries(args, operations)
    if args.producer:
        for r in resources:
            if r[0] is ResourceType.TOPIC:
                ops = [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
            elif r[0] is ResourceType.TRANSACTIONAL_ID:
                ops = [AclOperation.WRITE, AclOperation.DESCRIBE]
            else:
                continue
            out.setdefault(r, []).extend(_entries(args, ops))
        if args.idempotent:
            cluster = (ResourceType.CLUSTER, CLUSTER_NAME)
            out.setdefault(cluster, []).extend(_entries(args, [AclOperation.IDEMPOTENT_WRITE]))
    if args.consumer:
        for r in resources:
            if r[0] is ResourceType.TOPIC:
                ops = [AclOperation.READ, AclOperation.DESCRIBE]
            elif r[0] is ResourceType.GROUP:
                ops = [AclOperation.READ]
            else:
                continue
            out.setdefault(r, []).extend(_entries(args, ops))
    for (rtype, _name), entries in out.items():
        valid = set(supported_operations(rtype)) | {AclOperation.ALL}
        bad = {e[2] for e in entries} - valid
        if bad:
            raise UsageError(
                f"ResourceType {rtype.name} only supports operations "
                + ", ".join(_pascal(o.name) for o in sorted(valid))
            )
    return out


def _rows(bindings: list[AclBinding]) -> list[list[Any]]:
    return [
        [
            b.resource_type.name,
            b.resource_name,
            b.pattern_type.name,
            b.principal,
            b.host,
            _pascal(b.operation.name),
            _pascal(b.permission_type.name),
        ]
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
        )
    ]


def _describe(
    admin: Any, rtype: ResourceType, name: str | None, pattern: PatternType
) -> list[AclBinding]:
    req = describe_acls.Request(
        resource_type_filter=rtype,
        resource_name_filter=name,
        pattern_type_filter=pattern,
        principal_filter=None,
        host_filter=None,
        operation=AclOperation.ANY,
        permission_type=AclPermissionType.ANY,
    )
    _, resp = admin.call(describe_acls.API_KEY, req)
    check(resp.error_code, "DescribeAcls", resp.error_message)
    return [
        AclBinding(
            ResourceType.from_code(r.resource_type),
            r.resource_name,
            PatternType.from_code(r.pattern_type),
            a.principal,
            a.host,
            AclOperation.from_code(a.operation),
            AclPermissionType.from_code(a.permission_type),
        )
        for r in resp.resources
        for a in r.acls
    ]


def cmd_acls_list(args: argparse.Namespace) -> int:
    out = Output(args)
    try:
        pattern = _pattern_type(args.resource_pattern_type, for_add=False)
        resources = _resources(args, pattern)
        principals = _principals(args.principal)
    except UsageError as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    with admin_for(args) as admin:
        if resources:
            found: set[AclBinding] = set()
            for rtype, name in resources:
                found.update(_describe(admin, rtype, name, pattern))
            bindings = list(found)
        else:
            bindings = _describe(admin, ResourceType.ANY, None, PatternType.ANY)
    if principals:
        bindings = [b for b in bindings if b.principal in principals]
    show(out, COLUMNS, _rows(bindings))
    return EXIT_OK


def cmd_acls_add(args: argparse.Namespace) -> int:
    out = Output(args)
    try:
        pattern = _pattern_type(args.resource_pattern_type, for_add=True)
        plan = _resource_entries(args, pattern)
        if not plan:
            raise UsageError(
                "You must provide at least one resource: --topic <topic> or --cluster or "
                "--group <group> or --transactional-id <id>"
            )
        if any(not entries for entries in plan.values()):
            raise UsageError(
                "You must specify one of: --allow-principal, --deny-principal when trying "
                "to add ACLs."
            )
    except UsageError as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bindings = [
        AclBinding(rtype, name, pattern, p, h, op, perm)
        for (rtype, name), entries in plan.items()
        for p, h, op, perm in entries
    ]
    req = create_acls.Request(
        creations=[
            create_acls.AclCreation(
                resource_type=b.resource_type,
                resource_name=b.resource_name,
                resource_pattern_type=b.pattern_type,
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission_type,
            )
            for b in bindings
        ]
    )
    with admin_for(args) as admin:
        _, resp = admin.call(create_acls.API_KEY, req)
    failures = [
        f"{b}: {error_name(r.error_code)}" + (f": {r.error_message}" if r.error_message else "")
        for b, r in zip(bindings, resp.results, strict=True)
        if r.error_code
    ]
    if failures:
        raise AdminError("CreateAcls failed for " + "; ".join(failures))
    if out.json:
        show(out, COLUMNS, _rows(bindings))
    else:
        out.note(f"Added {len(bindings)} ACL(s):")
        show(out, COLUMNS, _rows(bindings))
    return EXIT_OK


def cmd_acls_remove(args: argparse.Namespace) -> int:
    out = Output(args)
    try:
        pattern = _pattern_type(args.resource_pattern_type, for_add=False)
        plan = _resource_entries(args, pattern)
        if not plan:
            raise UsageError(
                "You must provide at least one resource: --topic <topic> or --cluster or "
                "--group <group> or --transactional-id <id>"
            )
    except UsageError as exc:
        print(f"kgc: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    filters: list[Any] = []
    for (rtype, name), entries in plan.items():
        if not entries:  # no principal: every ACL of the resource
            filters.append((rtype, name, None, None, AclOperation.ANY, AclPermissionType.ANY))
        else:
            filters.extend((rtype, name, p, h, op, perm) for p, h, op, perm in entries)
    if not args.force:
        what = ", ".join(f"{rtype.name}:{name}" for rtype, name in plan)
        print(f"Are you sure you want to remove ACLs from {what} ({pattern.name})? (y/n)")
        if sys.stdin.readline().strip().lower() != "y":
            print("Nothing removed.", file=sys.stderr)
            return EXIT_ERROR
    req = delete_acls.Request(
        filters=[
            delete_acls.DeleteAclsFilter(
                resource_type_filter=rtype,
                resource_name_filter=name,
                pattern_type_filter=pattern,
                principal_filter=p,
                host_filter=h,
                operation=op,
                permission_type=perm,
            )
            for rtype, name, p, h, op, perm in filters
        ]
    )
    with admin_for(args) as admin:
        _, resp = admin.call(delete_acls.API_KEY, req)
    removed: set[AclBinding] = set()
    for result in resp.filter_results:
        check(result.error_code, "DeleteAcls", result.error_message)
        for m in result.matching_acls:
            check(m.error_code, "DeleteAcls", m.error_message)
            removed.add(
                AclBinding(
                    ResourceType.from_code(m.resource_type),
                    m.resource_name,
                    PatternType.from_code(m.pattern_type),
                    m.principal,
                    m.host,
                    AclOperation.from_code(m.operation),
                    AclPermissionType.from_code(m.permission_type),
                )
            )
    if not out.json:
        out.note(f"Removed {len(removed)} ACL(s):")
    show(out, COLUMNS, _rows(list(removed)))
    return EXIT_OK


def _resource_options(p: argparse.ArgumentParser, *, for_add: bool) -> None:
    p.add_argument("--topic", action="append", metavar="TOPIC", help="a topic (repeatable)")
    p.add_argument("--group", action="append", metavar="GROUP", help="a group (repeatable)")
    p.add_argument(
        "--transactional-id", action="append", metavar="ID", help="a transactional id (repeatable)"
    )
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        default="LITERAL",
        metavar="TYPE",
        help="LITERAL (default) or PREFIXED"
        + ("" if for_add else "; ANY or MATCH as filters")
        + " (applies to every resource named)",
    )


def _entry_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-principal",
        action="append",
        metavar="TYPE:NAME",
        help="e.g. User:alice (repeatable)",
    )
    p.add_argument(
        "--deny-principal",
        action="append",
        metavar="TYPE:NAME",
        help="e.g. User:mallory (repeatable)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="HOST",
        help="host of the allowed principals (default *)",
    )
    p.add_argument(
        "--deny-host",
        action="append",
        metavar="HOST",
        help="host of the denied principals (default *)",
    )
    p.add_argument(
        "--operation",
        action="append",
        metavar="OP",
        help="Read, Write, Describe, All, ... (repeatable; default All)",
    )
    p.add_argument(
        "--consumer", action="store_true", help="READ+DESCRIBE on the topics, READ on the groups"
    )
    p.add_argument(
        "--producer",
        action="store_true",
        help="WRITE+DESCRIBE+CREATE on the topics, WRITE+DESCRIBE on transactional ids",
    )
    p.add_argument(
        "--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster"
    )


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    acls = sub.add_parser("acls", help="list, add and remove ACLs").add_subparsers(
        dest="action", required=True
    )
    p = leaf(
        common, acls, "list", cmd_acls_list, "list ACLs (all, or those of the resources named)"
    )
    _resource_options(p, for_add=False)
    p.add_argument(
        "--principal", action="append", metavar="TYPE:NAME", help="only this principal's ACLs"
    )
    p = leaf(common, acls, "add", cmd_acls_add, "add ACLs")
    _resource_options(p, for_add=True)
    _entry_options(p)
    p = leaf(
        common,
        acls,
        "remove",
        cmd_acls_remove,
        "remove ACLs (all of a resource without principals)",
    )
    _resource_options(p, for_add=False)
    _entry_options(p)
    p.add_argument("--force", action="store_true", help="do not ask for confirmation")
