"""SASL/OAUTHBEARER end to end: confluent-kafka with an ``oauth_cb`` against a real ``kgc serve``.

How this works: the test makes an RSA signing key and writes its public half as a JWKS file;
kgc is given it as ``sasl.oauthbearer.jwks.endpoint.url=file://...`` with an expected
audience and issuer, on a SASL_SSL listener (certificates from ``certkit``) that offers only
OAUTHBEARER, and with the StandardAuthorizer and ``super.users=User:svc-orders``. The client's
``oauth_cb`` returns a JWT signed with the test's key: with ``sub=svc-orders`` it creates a
topic, produces, consumes with a group and commits — which proves both that the token was
accepted and that the principal came from its ``sub`` claim (any other principal would be
denied by the authorizer: a valid token for ``sub=nobody`` authenticates but may not create
topics). An expired token, a token for another audience and one signed by a key not in the
JWKS are each refused (librdkafka reports the SASL authentication failure), while a good
client is still served.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jwt
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from support.certkit import Pki, make_pki
from support.groupkit import wait_until
from support.kgc_process import KgcProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ISSUER = "https://idp.kgc.test"
AUDIENCE = "kgc"
KID = "test-key-1"
SUPER = "svc-orders"
PARTITIONS = 2
MESSAGES = 20


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


SIGNING_KEY = _rsa()
ROGUE_KEY = _rsa()  # signs tokens kgc must refuse: its public key is not in the JWKS


class OAuthKgc:
    def __init__(self, proc: KgcProcess, port: int, pki: Pki) -> None:
        self.proc = proc
        self.port = port
        self.pki = pki

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def kgc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthKgc]:
    base = tmp_path_factory.mktemp("oauth")
    pki = make_pki(base / "pki")
    jwk = json.loads(RSAAlgorithm.to_jwk(SIGNING_KEY.public_key()))
    jwks = base / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]}))
    port, sasl_port = free_port(), free_port()
    proc = KgcProcess(
        base / "data",
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}",
        "--ssl-keystore-type",
        "PEM",
        "--ssl-keystore-location",
        str(pki.server),
        "--sasl-enabled-mechanisms",
        "OAUTHBEARER",
        "--sasl-oauthbearer-jwks-endpoint-url",
        jwks.as_uri(),
        "--sasl-oauthbearer-expected-audience",
        AUDIENCE,
        "--sasl-oauthbearer-expected-issuer",
        ISSUER,
        "--authorizer-class-name",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "--super-users",
        f"User:{SUPER}",
        port=port,
    )
    proc.start()
    try:
        yield OAuthKgc(proc, sasl_port, pki)
    finally:
        proc.stop()


def token(
    sub: str = SUPER,
    *,
    aud: str = AUDIENCE,
    exp_in: int = 600,
    key: rsa.RSAPrivateKey = SIGNING_KEY,
) -> tuple[str, float]:
    """A signed JWT and its expiry (seconds since the epoch)."""
    now = int(time.time())
    claims = {"sub": sub, "iss": ISSUER, "aud": aud, "iat": now - 5, "exp": now + exp_in}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID}), float(claims["exp"])


def oauth_conf(
    kgc: OAuthKgc, make: Callable[[], tuple[str, float]], sub: str = SUPER
) -> dict[str, Any]:
    def oauth_cb(_config: str) -> tuple[str, float, str, dict[str, str]]:
        jwt_, expiry = make()
        return jwt_, expiry, sub, {}

    return {
        "bootstrap.servers": kgc.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(kgc.pki.ca),
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


def good_conf(kgc: OAuthKgc) -> dict[str, Any]:
    return oauth_conf(kgc, token)


def test_group_end_to_end_with_a_signed_token(kgc: OAuthKgc) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(good_conf(kgc))
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(20)
    producer = Producer(good_conf(kgc))
    values = [f"o{i}".encode() for i in range(MESSAGES)]
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            **good_conf(kgc),
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])

        def consumed() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(msg.value() or b"")
            return len(seen) >= MESSAGES

        wait_until(consumed, timeout=60, interval=0, what="every record consumed")
        consumer.commit(asynchronous=False)
        got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 20)
        assert sorted(tp.offset for tp in got) == [MESSAGES // PARTITIONS] * PARTITIONS
    finally:
        consumer.close()
    assert sorted(seen) == sorted(values)


def test_the_principal_is_the_tokens_subject(kgc: OAuthKgc) -> None:
    """A valid token for another subject authenticates (Metadata answers) but is not the
    super user: CreateTopics is refused by the authorizer."""
    conf = oauth_conf(kgc, lambda: token("nobody"), sub="nobody")
    admin = AdminClient(conf)
    md = admin.list_topics(timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", kgc.port)]
    topic = f"denied-{uuid.uuid4().hex[:6]}"
    (future,) = admin.create_topics([NewTopic(topic, 1, 1)]).values()
    with pytest.raises(KafkaException) as err:
        future.result(20)
    assert err.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err.value
    line = "Principal = User:nobody is Denied operation = CREATE"
    wait_until(lambda: line in kgc.proc.log(), timeout=10, what="the denial logged for nobody")


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        pytest.param(lambda: token(exp_in=-600), "The JWT is no longer valid", id="expired"),
        pytest.param(
            lambda: token(aud="another-service"), "Audience doesn't match", id="wrong-audience"
        ),
        pytest.param(
            lambda: token(key=ROGUE_KEY), "Signature verification failed", id="unknown-key"
        ),
    ],
)
def test_bad_token_refused_and_others_still_served(
    kgc: OAuthKgc, bad: Callable[[], tuple[str, float]], reason: str
) -> None:
    errors: list[KafkaError] = []
    log_before = len(kgc.proc.log_path.read_text(errors="replace"))

    def bad_token() -> tuple[str, float]:
        jwt_, _ = bad()
        # librdkafka refuses to hand over a token it knows expired; tell it a later expiry
        # so the server is the one that judges the token's own exp claim.
        return jwt_, time.time() + 600

    conf = {**oauth_conf(kgc, bad_token), "error_cb": errors.append}
    admin = AdminClient(conf)
    # A refused login does not end the call (librdkafka retries it): the call times out, and
    # the refusal is what error_cb is told, waited for below. So a short timeout, not 5 s.
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)
    for _ in range(50):  # error callbacks are served by poll()
        if errors:
            break
        admin.poll(0.1)
    assert any(
        e.code() == KafkaError._AUTHENTICATION or "Authentication failed" in e.str() for e in errors
    ), errors
    # Refused for the token's fault, said on the server (the client is told nothing more).
    new_lines = kgc.proc.log_path.read_text(errors="replace")[log_before:].splitlines()
    refusals = [ln for ln in new_lines if "failed authentication" in ln]
    assert refusals and all(reason in ln for ln in refusals), refusals[:3]
    ok = AdminClient(good_conf(kgc))
    assert ok.list_topics(timeout=10).brokers
