"""ssl.principal.mapping.rules as Kafka's SslPrincipalMapper, over Java's RFC 2253 names."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from coordinator.security import KafkaPrincipal
from coordinator.security.principal_mapping import (
    NoMatchingRule,
    SslPrincipalMapper,
    rfc2253_name,
)

# Kafka's SslPrincipalMapperTest, case by case.
KAFKA_RULES = ", ".join(
    [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
)


@pytest.mark.parametrize(
    ("dn", "expected"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_mapper_examples(dn: str, expected: str) -> None:
    assert SslPrincipalMapper(KAFKA_RULES).name(dn) == expected


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("", "[]"),
        ("DEFAULT", "[DEFAULT]"),
        ("RULE://", "[RULE:/]"),
        ("RULE:/.*/", "[RULE:/.*]"),
        ("RULE:/.*/L", "[RULE:/.*/L]"),
        ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
        ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"),
        ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
        ("  RULE:  /     /U   ,DEFAULT  ", "[RULE:  /     /U, DEFAULT]"),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
        ),
        (",   , , ,      , , ,   ", "[]"),
        (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
        (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "[RULE: /   , DEFAULT]"),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "[RULE:   /  /U, DEFAULT]"),
        (r"RULE:\/\\\(\)\n\t/\/\//", r"[RULE:\/\\\(\)\n\t/\/\/]"),
        (r"RULE:\**\/+/*/L,RULE:\/*\**/**/", r"[RULE:\**\/+/*/L, RULE:\/*\**/**]"),
        (
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT",
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, "
            "DEFAULT, /DEFAULT, DEFAULT]",
        ),
    ],
)
def test_rules_splitting(rules: str, expected: str) -> None:
    assert str(SslPrincipalMapper(rules)) == expected


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_no_matching_rule_fails() -> None:
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x,OU=Other")


def test_back_references_beyond_the_groups_are_literal() -> None:
    # Kafka treats $2 with one group as a literal "$2"; $12 with one group as $1 then "2".
    assert SslPrincipalMapper("RULE:^CN=(\\w+).*$/$1-$2/").name("CN=bob,O=x") == "bob-$2"
    assert SslPrincipalMapper("RULE:^CN=(\\w+).*$/$12/").name("CN=bob,O=x") == "bob2"


def _subject(*attrs: tuple[x509.ObjectIdentifier, str]) -> bytes:
    return x509.Name([x509.NameAttribute(oid, v) for oid, v in attrs]).public_bytes()


def test_rfc2253_name_is_javas() -> None:
    # Written last RDN first, keywords for CN/O/OU/C, as X500Principal.getName().
    der = _subject(
        (NameOID.COUNTRY_NAME, "US"),
        (NameOID.ORGANIZATION_NAME, "Sun Microsystems"),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, "JavaSoft"),
        (NameOID.COMMON_NAME, "Duke"),
    )
    assert rfc2253_name(der) == "CN=Duke,OU=JavaSoft,O=Sun Microsystems,C=US"


def test_rfc2253_escapes_and_unknown_attributes_as_java_does() -> None:
    # Java escapes , = + < > # ; " \ anywhere and leading/trailing spaces; attributes
    # without an RFC 2253 keyword (emailAddress) are OID=#hex of the DER value.
    der = _subject(
        (NameOID.EMAIL_ADDRESS, "a@b.c"),
        (NameOID.COMMON_NAME, " Tkac, Adam=#1 "),
    )
    email_der = bytes([0x16, 5]) + b"a@b.c"  # IA5String
    assert rfc2253_name(der) == (
        "CN=\\ Tkac\\, Adam\\=\\#1\\ ,1.2.840.113549.1.9.1=#" + email_der.hex()
    )


def test_multi_valued_rdn_joined_with_plus() -> None:
    rdn = x509.RelativeDistinguishedName(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
            x509.NameAttribute(NameOID.USER_ID, "a1"),
        ]
    )
    der = x509.Name([rdn]).public_bytes()
    name = rfc2253_name(der)
    assert set(name.split("+")) == {"CN=alice", "UID=a1"}


def test_principal_is_user_with_the_mapped_name(tmp_path: object) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec
    from support.certkit import make_cert

    from coordinator.security.principal_mapping import principal_from_certificate

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kgc"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "clients"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Alice"),
        ]
    )
    from cryptography.hazmat.primitives.serialization import Encoding

    der = make_cert(name, key, name, key).public_bytes(Encoding.DER)
    assert principal_from_certificate(der, SslPrincipalMapper("DEFAULT")) == KafkaPrincipal(
        "User", "CN=Alice,OU=clients,O=kgc"
    )
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),OU=clients.*$/$1/L,DEFAULT")
    assert principal_from_certificate(der, mapper) == KafkaPrincipal("User", "alice")
