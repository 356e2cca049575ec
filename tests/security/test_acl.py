"""The ACL matcher and authorizer: a table of bindings x requests with Kafka's decisions.

Each case names a set of bindings, a request (principal, host, operation, resource) and
the decision StandardAuthorizer gives; the same table runs against a brute-force matcher
written straight from Kafka's rules, over random bindings, so the index cannot drift from
the rules.
"""

from __future__ import annotations

import random

import pytest

from coordinator.security import KafkaPrincipal
from coordinator.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    all_operations,
    binding_error,
    filter_error,
    parse_super_users,
)

T, G, C, X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
O = AclOperation  # noqa: E741
ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "10.0.0.1"


def acl(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    perm: AclPermissionType = ALLOW,
    *,
    pattern: PatternType = LIT,
    principal: str = "User:alice",
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


# (case id, bindings, principal, host, operation, resource type, name, expected)
CASES: list[
    tuple[str, list[AclBinding], KafkaPrincipal, str, AclOperation, ResourceType, str, bool]
] = [
    ("no acls: denied by default", [], ALICE, HOST, O.READ, T, "orders", False),
    ("literal allow", [acl(T, "orders", O.READ)], ALICE, HOST, O.READ, T, "orders", True),
    ("literal other name", [acl(T, "orders", O.READ)], ALICE, HOST, O.READ, T, "orders2", False),
    ("literal is not a prefix", [acl(T, "ord", O.READ)], ALICE, HOST, O.READ, T, "orders", False),
    ("other operation", [acl(T, "orders", O.WRITE)], ALICE, HOST, O.READ, T, "orders", False),
    ("other principal", [acl(T, "orders", O.READ)], BOB, HOST, O.READ, T, "orders", False),
    ("other resource type", [acl(G, "orders", O.READ)], ALICE, HOST, O.READ, T, "orders", False),
    (
        "prefixed allow",
        [acl(T, "ord", O.READ, pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        True,
    ),
    (
        "prefixed equal name",
        [acl(T, "orders", O.READ, pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        True,
    ),
    (
        "prefixed longer than name",
        [acl(T, "orders-x", O.READ, pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "prefixed not a prefix",
        [acl(T, "abc", O.READ, pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    ("wildcard resource", [acl(T, "*", O.READ)], ALICE, HOST, O.READ, T, "anything", True),
    (
        "prefixed '*' is no wildcard",
        [acl(T, "*", O.READ, pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "anything",
        False,
    ),
    (
        "wildcard principal",
        [acl(T, "orders", O.READ, principal="User:*")],
        BOB,
        HOST,
        O.READ,
        T,
        "orders",
        True,
    ),
    (
        "User:* matches a principal of any type, as in Kafka",
        [acl(T, "orders", O.READ, principal="User:*")],
        KafkaPrincipal("Group", "x"),
        HOST,
        O.READ,
        T,
        "orders",
        True,
    ),
    ("host matches", [acl(T, "orders", O.READ, host=HOST)], ALICE, HOST, O.READ, T, "orders", True),
    (
        "host differs",
        [acl(T, "orders", O.READ, host="10.0.0.2")],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "ALL allows everything",
        [acl(T, "orders", O.ALL)],
        ALICE,
        HOST,
        O.ALTER_CONFIGS,
        T,
        "orders",
        True,
    ),
    (
        "READ implies DESCRIBE",
        [acl(T, "orders", O.READ)],
        ALICE,
        HOST,
        O.DESCRIBE,
        T,
        "orders",
        True,
    ),
    (
        "WRITE implies DESCRIBE",
        [acl(T, "orders", O.WRITE)],
        ALICE,
        HOST,
        O.DESCRIBE,
        T,
        "orders",
        True,
    ),
    ("DELETE implies DESCRIBE", [acl(G, "g", O.DELETE)], ALICE, HOST, O.DESCRIBE, G, "g", True),
    (
        "ALTER implies DESCRIBE",
        [acl(C, "kafka-cluster", O.ALTER)],
        ALICE,
        HOST,
        O.DESCRIBE,
        C,
        "kafka-cluster",
        True,
    ),
    (
        "CREATE does not imply DESCRIBE",
        [acl(T, "orders", O.CREATE)],
        ALICE,
        HOST,
        O.DESCRIBE,
        T,
        "orders",
        False,
    ),
    (
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        [acl(T, "orders", O.ALTER_CONFIGS)],
        ALICE,
        HOST,
        O.DESCRIBE_CONFIGS,
        T,
        "orders",
        True,
    ),
    (
        "DESCRIBE implies nothing",
        [acl(T, "orders", O.DESCRIBE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "READ does not imply DESCRIBE_CONFIGS",
        [acl(T, "orders", O.READ)],
        ALICE,
        HOST,
        O.DESCRIBE_CONFIGS,
        T,
        "orders",
        False,
    ),
    (
        "DENY wins over ALLOW",
        [acl(T, "orders", O.READ), acl(T, "orders", O.READ, DENY)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "DENY prefixed over ALLOW literal",
        [acl(T, "orders", O.READ), acl(T, "or", O.READ, DENY, pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "DENY wildcard principal over ALLOW",
        [acl(T, "orders", O.READ), acl(T, "orders", O.READ, DENY, principal="User:*")],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "DENY wildcard resource over ALLOW",
        [acl(T, "orders", O.READ), acl(T, "*", O.ALL, DENY)],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        False,
    ),
    (
        "DENY from another host does not apply",
        [acl(T, "orders", O.READ), acl(T, "orders", O.READ, DENY, host="10.9.9.9")],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        True,
    ),
    (
        "DENY READ does not deny DESCRIBE",
        [acl(T, "orders", O.READ), acl(T, "orders", O.READ, DENY)],
        ALICE,
        HOST,
        O.DESCRIBE,
        T,
        "orders",
        True,
    ),
    (
        "DENY ALL denies DESCRIBE",
        [acl(T, "orders", O.READ), acl(T, "orders", O.ALL, DENY)],
        ALICE,
        HOST,
        O.DESCRIBE,
        T,
        "orders",
        False,
    ),
    (
        "DENY for bob leaves alice",
        [acl(T, "orders", O.READ), acl(T, "orders", O.READ, DENY, principal="User:bob")],
        ALICE,
        HOST,
        O.READ,
        T,
        "orders",
        True,
    ),
    ("group READ", [acl(G, "payments", O.READ)], ALICE, HOST, O.READ, G, "payments", True),
    (
        "transactional id WRITE",
        [acl(X, "tx-", O.WRITE, pattern=PRE)],
        ALICE,
        HOST,
        O.WRITE,
        X,
        "tx-1",
        True,
    ),
]


def authorizer(bindings: list[AclBinding], **kw: object) -> Authorizer:
    return Authorizer(bindings, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bindings", "principal", "host", "op", "rtype", "name", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decision_table(
    bindings: list[AclBinding],
    principal: KafkaPrincipal,
    host: str,
    op: AclOperation,
    rtype: ResourceType,
    name: str,
    expected: bool,
) -> None:
    assert authorizer(bindings).authorize(principal, host, op, rtype, name) is expected
    assert reference(bindings, principal, host, op, rtype, name, set(), False) is expected


def test_super_users_may_do_anything_even_against_deny() -> None:
    a = Authorizer([acl(T, "*", O.ALL, DENY, principal="User:*")], super_users={"User:root"})
    assert a.authorize(KafkaPrincipal("User", "root"), HOST, O.DELETE, T, "orders")
    assert not a.authorize(ALICE, HOST, O.DELETE, T, "orders")


def test_allow_everyone_if_no_acl_found() -> None:
    a = Authorizer(
        [acl(T, "secret", O.READ, principal="User:bob")], allow_everyone_if_no_acl_found=True
    )
    assert a.authorize(ALICE, HOST, O.READ, T, "public")  # no ACL on the resource
    # ACLs exist for the resource (for someone else): the default does not apply.
    assert not a.authorize(ALICE, HOST, O.READ, T, "secret")
    # ... even ACLs for another operation count as ACLs on the resource.
    assert not a.authorize(BOB, HOST, O.WRITE, T, "secret")
    assert not Authorizer([]).authorize(ALICE, HOST, O.READ, T, "public")


def test_prefixed_acls_of_many_lengths() -> None:
    a = Authorizer(
        [
            acl(T, "a", O.READ, pattern=PRE),
            acl(T, "abc", O.WRITE, pattern=PRE),
            acl(T, "abcd-", O.READ, DENY, pattern=PRE),
        ]
    )
    assert a.authorize(ALICE, HOST, O.READ, T, "abc")
    assert a.authorize(ALICE, HOST, O.WRITE, T, "abcx")
    assert not a.authorize(ALICE, HOST, O.WRITE, T, "abx")
    assert not a.authorize(ALICE, HOST, O.READ, T, "abcd-1")
    assert a.authorize(ALICE, HOST, O.WRITE, T, "abcd-1")


def test_update_replaces_the_bindings_and_forgets_cached_decisions() -> None:
    a = Authorizer([acl(G, "g", O.READ)])
    assert a.authorize(ALICE, HOST, O.READ, G, "g")
    a.update([acl(G, "g", O.READ, DENY)])
    assert not a.authorize(ALICE, HOST, O.READ, G, "g")
    a.update([])
    assert not a.authorize(ALICE, HOST, O.READ, G, "g")


def test_denials_are_reported_only_for_audited_checks() -> None:
    seen: list[tuple[object, ...]] = []
    a = Authorizer([acl(G, "g", O.READ)], on_denied=lambda *args: seen.append(args))
    assert a.authorize(ALICE, HOST, O.READ, G, "g")
    assert not a.authorize(BOB, HOST, O.READ, G, "g")
    assert not a.authorize(BOB, HOST, O.READ, G, "g", audit=False)
    a.authorized_operations(BOB, HOST, G, "g")
    assert seen == [(BOB, HOST, O.READ, G, "g")]
    # Cached decisions are reported too.
    a.authorize(BOB, HOST, O.READ, G, "g")
    assert len(seen) == 2


def test_authorized_operations_bitfield() -> None:
    a = Authorizer([acl(G, "g", O.READ), acl(T, "t", O.ALTER_CONFIGS)])
    assert a.authorized_operations(ALICE, HOST, G, "g") == (1 << O.READ) | (1 << O.DESCRIBE)
    assert a.authorized_operations(ALICE, HOST, T, "t") == (
        (1 << O.ALTER_CONFIGS) | (1 << O.DESCRIBE_CONFIGS)
    )
    assert a.authorized_operations(BOB, HOST, G, "g") == 0
    root = Authorizer([], super_users={"User:alice"})
    assert root.authorized_operations(ALICE, HOST, G, "g") == all_operations(G)
    # Kafka's GROUP set: READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
    assert all_operations(G) == sum(1 << o for o in (3, 8, 6, 10, 11))


def test_authorize_by_resource_type() -> None:
    a = Authorizer([acl(T, "t1", O.WRITE), acl(T, "t", O.WRITE, DENY, pattern=PRE)])
    assert not a.authorize_by_resource_type(ALICE, HOST, O.WRITE, T)  # dominated by the deny
    a.update([acl(T, "t1", O.WRITE), acl(T, "x", O.WRITE, DENY, pattern=PRE)])
    assert a.authorize_by_resource_type(ALICE, HOST, O.WRITE, T)
    assert not a.authorize_by_resource_type(BOB, HOST, O.WRITE, T)
    a.update([acl(T, "*", O.WRITE, principal="User:*")])
    assert a.authorize_by_resource_type(BOB, HOST, O.WRITE, T)


# -- filters (DescribeAcls / DeleteAcls)

B_LIT = acl(T, "orders", O.READ)
B_STAR = acl(T, "*", O.READ)
B_PRE = acl(T, "ord", O.READ, pattern=PRE)
B_OTHER = acl(T, "payments", O.WRITE, DENY, principal="User:bob", host="10.0.0.2")
B_GROUP = acl(G, "orders", O.READ)
ALL_B = [B_LIT, B_STAR, B_PRE, B_OTHER, B_GROUP]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (AclBindingFilter(), ALL_B),
        (AclBindingFilter(resource_type=T), [B_LIT, B_STAR, B_PRE, B_OTHER]),
        (AclBindingFilter(resource_name="orders"), [B_LIT, B_GROUP]),
        (AclBindingFilter(T, "orders", PatternType.LITERAL), [B_LIT]),
        (AclBindingFilter(T, "ord", PatternType.PREFIXED), [B_PRE]),
        (AclBindingFilter(T, "orders", PatternType.ANY), [B_LIT]),
        (AclBindingFilter(T, "orders", PatternType.MATCH), [B_LIT, B_STAR, B_PRE]),
        (AclBindingFilter(T, None, PatternType.PREFIXED), [B_PRE]),
        (AclBindingFilter(principal="User:bob"), [B_OTHER]),
        (AclBindingFilter(host="10.0.0.2"), [B_OTHER]),
        (AclBindingFilter(operation=O.WRITE), [B_OTHER]),
        (AclBindingFilter(permission_type=DENY), [B_OTHER]),
        (AclBindingFilter(T, "orders", PatternType.MATCH, permission_type=DENY), []),
    ],
)
def test_filter_matching(flt: AclBindingFilter, expected: list[AclBinding]) -> None:
    assert [b for b in ALL_B if flt.matches(b)] == expected


def test_create_validation_messages() -> None:
    ok = acl(T, "orders", O.READ)
    assert binding_error(ok) is None
    assert binding_error(acl(C, "kafka-cluster", O.ALTER)) is None
    assert binding_error(acl(C, "other", O.ALTER)) == (
        "The only valid name for the CLUSTER resource is kafka-cluster"
    )
    assert binding_error(acl(T, "", O.READ)) == "Invalid empty resource name"
    assert binding_error(acl(ResourceType.ANY, "x", O.READ)) == "Invalid resourceType ANY"
    assert (
        binding_error(acl(T, "x", O.READ, pattern=PatternType.MATCH)) == "Invalid patternType MATCH"
    )
    assert binding_error(acl(T, "x", O.ANY)) == "Invalid operation ANY"
    assert binding_error(acl(T, "x", O.READ, AclPermissionType.ANY)) == "Invalid permissionType ANY"
    assert binding_error(acl(T, "x", O.READ, principal="alice")) == (
        "Could not parse principal from `alice` (no colon is present separating the principal "
        "type from the principal name)"
    )
    assert binding_error(acl(T, "x", O.READ, principal=":alice")) is None  # as Kafka 4.4
    assert filter_error(AclBindingFilter()) is None
    assert (
        filter_error(AclBindingFilter(resource_type=ResourceType.UNKNOWN))
        == "Unknown patternFilter."
    )
    assert filter_error(AclBindingFilter(operation=O.UNKNOWN)) == "Unknown entryFilter."


def test_codes_are_kafkas() -> None:
    assert [ResourceType[n] for n in ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")] == [
        2,
        3,
        4,
        5,
    ]
    assert (PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH) == (3, 4, 2)
    assert (O.ALL, O.READ, O.DESCRIBE, O.IDEMPOTENT_WRITE) == (2, 3, 8, 12)
    assert (DENY, ALLOW) == (2, 3)
    assert ResourceType.from_code(99) is ResourceType.UNKNOWN
    assert AclOperation.from_code(-1) is AclOperation.UNKNOWN


def test_parse_super_users() -> None:
    assert parse_super_users("User:a; User:b;;") == {"User:a", "User:b"}
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError, match=r"super\.users"):
        parse_super_users("alice")


# -- the index against the rules, over random bindings


def reference(
    bindings: list[AclBinding],
    principal: KafkaPrincipal,
    host: str,
    op: AclOperation,
    rtype: ResourceType,
    name: str,
    super_users: set[str],
    allow_everyone: bool,
) -> bool:
    """Kafka's rules, applied binding by binding, without any index."""
    if str(principal) in super_users:
        return True
    on_resource = [
        b
        for b in bindings
        if b.resource_type == rtype
        and (
            (b.pattern_type is LIT and b.resource_name in (name, "*"))
            or (b.pattern_type is PRE and name.startswith(b.resource_name))
        )
    ]
    if not on_resource:
        return allow_everyone
    implied = {
        O.DESCRIBE: {O.READ, O.WRITE, O.DELETE, O.ALTER},
        O.DESCRIBE_CONFIGS: {O.ALTER_CONFIGS},
    }
    allow = deny = False
    for b in on_resource:
        if b.principal not in (str(principal), "User:*") or b.host not in (host, "*"):
            continue
        if b.permission_type is DENY and b.operation in (op, O.ALL):
            deny = True
        if b.permission_type is ALLOW and (
            b.operation in (op, O.ALL) or b.operation in implied.get(op, set())
        ):
            allow = True
    return allow and not deny


def test_index_agrees_with_the_rules_on_random_bindings() -> None:
    rng = random.Random(16)
    names = ["a", "ab", "abc", "abd", "b", "*", "ba"]
    principals = ["User:alice", "User:bob", "User:*"]
    hosts = ["*", HOST, "10.0.0.2"]
    ops = [
        O.ALL,
        O.READ,
        O.WRITE,
        O.DESCRIBE,
        O.DELETE,
        O.ALTER,
        O.ALTER_CONFIGS,
        O.DESCRIBE_CONFIGS,
    ]
    for _ in range(300):
        bindings = [
            AclBinding(
                rng.choice([T, G]),
                rng.choice(names),
                rng.choice([LIT, PRE]),
                rng.choice(principals),
                rng.choice(hosts),
                rng.choice(ops),
                rng.choice([ALLOW, DENY]),
            )
            for _ in range(rng.randint(0, 8))
        ]
        everyone = rng.random() < 0.3
        a = Authorizer(bindings, super_users={"User:root"}, allow_everyone_if_no_acl_found=everyone)
        for _ in range(30):
            who = KafkaPrincipal("User", rng.choice(["alice", "bob", "carol", "root"]))
            req = (
                who,
                rng.choice([HOST, "10.0.0.2"]),
                rng.choice(ops[1:]),
                rng.choice([T, G]),
                rng.choice([*names, "abcd", "c"]),
            )
            expected = reference(bindings, *req, {"User:root"}, everyone)
            assert a.authorize(*req) is expected, (bindings, req)
