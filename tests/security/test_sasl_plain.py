"""SASL/PLAIN against JAAS users, and Kafka's JAAS line parsing."""

from __future__ import annotations

import pytest

from coordinator.security import AuthenticationError
from coordinator.security.jaas import parse, parse_single
from coordinator.security.sasl.plain import PlainMechanism

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)


def test_jaas_line_as_kafka_writes_it() -> None:
    entry = parse_single(JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.control_flag == "required"
    assert entry.options == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": "alice-secret",
    }


def test_jaas_quotes_escapes_comments_and_words() -> None:
    entries = parse(
        "/* two modules */ a.B required k1=word-with_$.chars // note\n"
        'k2=\'single q\' k3="esc\\"aped\\n\\101";\n'
        "c.D OPTIONAL;"
    )
    assert [(e.login_module, e.control_flag) for e in entries] == [
        ("a.B", "required"),
        ("c.D", "optional"),
    ]
    assert entries[0].options == {"k1": "word-with_$.chars", "k2": "single q", "k3": 'esc"aped\nA'}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Login module not specified"),
        ("a.B", "control flag not specified"),
        ("a.B maybe;", "Invalid login module control flag"),
        ("a.B required k=;", "Value not specified for key 'k'"),
        ("a.B required k=1234;", "Value not specified for key 'k'"),  # Kafka: a number token
        ('a.B required k="v"', "not terminated by semi-colon"),
    ],
)
def test_jaas_errors_are_kafkas(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_broker_jaas_config_holds_one_module() -> None:
    with pytest.raises(ValueError, match="contains 2 login modules"):
        parse_single("a.B required; c.D required;")


@pytest.fixture
def plain() -> PlainMechanism:
    return PlainMechanism.from_jaas(parse_single(JAAS))


def test_plain_authenticates_a_jaas_user(plain: PlainMechanism) -> None:
    server = plain.server()
    assert server.evaluate(b"\x00alice\x00alice-secret") == b""
    assert server.complete and str(server.principal) == "User:alice"
    authz = plain.server()
    authz.evaluate(b"alice\x00alice\x00alice-secret")
    assert authz.principal.name == "alice"


@pytest.mark.parametrize(
    "token",
    [
        b"\x00alice\x00wrong",
        b"\x00mallory\x00alice-secret",
        b"\x00username\x00admin",  # JAAS options that are not user_ entries are not users
        b"bob\x00alice\x00alice-secret",  # authorization id other than the user
        b"\x00alice\x00",
        b"\x00\x00alice-secret",
        b"alice-secret",
        b"\x00alice\x00alice-secret\x00more",
        b"\xff\xfe\x00alice\x00alice-secret",
        b"",
    ],
)
def test_plain_refusals(plain: PlainMechanism, token: bytes) -> None:
    server = plain.server()
    with pytest.raises(AuthenticationError):
        server.evaluate(token)
    assert not server.complete
    with pytest.raises(AuthenticationError):  # one message per exchange
        server.evaluate(b"\x00alice\x00alice-secret")


def test_plain_needs_the_plain_login_module() -> None:
    with pytest.raises(ValueError, match="PlainLoginModule"):
        PlainMechanism.from_jaas(parse_single('x.Y required user_a="b";'))
