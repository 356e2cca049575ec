"""SASL on kgc's listeners: the mechanisms by name, and what one listener authenticates with.

How this works: ``sasl.enabled.mechanisms`` (Kafka's name; per listener as
``listener.name.<listener>.sasl.enabled.mechanisms``) lists the mechanisms a SASL listener
offers. Each name maps to a factory in ``MECHANISMS`` that builds the ``SaslMechanism`` from
its scoped settings (``MechanismContext``): PLAIN from its JAAS line, SCRAM-SHA-256/512 from
the SCRAM credential store, OAUTHBEARER from the ``sasl.oauthbearer.*`` settings. Settings
are looked up as Kafka scopes them on a broker, most specific first:
``listener.name.<listener>.<mechanism>.<name>``, ``listener.name.<listener>.<name>``, then
the unscoped setting (listener and mechanism names lower-cased in the keys, as Kafka's
ListenerName.configPrefix writes them). ``sasl_listener`` puts it together into a
``SaslListener``; every connection on the listener gets a ``SaslSession`` from it (the
connection logic, ``coordinator/server/sasl.py``). A mechanism that cannot be built (no JAAS
line for PLAIN, an unknown name) stops start-up with one line naming the setting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coordinator.security import CredentialStore, SaslMechanism
from coordinator.security.jaas import JaasEntry, parse_single
from coordinator.security.sasl.plain import PlainMechanism
from coordinator.security.sasl.scram import MECHANISMS as SCRAM_MECHANISMS
from coordinator.security.sasl.scram import ScramMechanism

if TYPE_CHECKING:
    from coordinator.config import Settings

__all__ = [
    "DEFAULT_MAX_RECEIVE_SIZE",
    "MECHANISMS",
    "MechanismContext",
    "SaslListener",
    "sasl_listener",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size default


@dataclass(frozen=True, slots=True)
class MechanismContext:
    """What a mechanism factory may read: its settings, scoped to listener and mechanism."""

    listener: str
    mechanism: str
    settings: Settings | None
    props: Mapping[str, str]  # listener-scoped raw properties (``listener.name.*``)
    credentials: CredentialStore | None

    def get(self, name: str) -> str | None:
        """A setting as Kafka scopes it: listener+mechanism, listener, then unscoped."""
        prefix = f"listener.name.{self.listener.lower()}."
        keys = [f"{prefix}{name}"]
        if self.mechanism:
            keys.insert(0, f"{prefix}{self.mechanism.lower()}.{name}")
        for key in keys:
            if key in self.props:
                return self.props[key]
        value = getattr(self.settings, name.replace(".", "_"), None)
        return None if value is None else str(value)

    def jaas(self) -> JaasEntry | None:
        text = self.get("sasl.jaas.config")
        if text is None:
            return None
        return parse_single(text, self.setting_name("sasl.jaas.config"))

    def setting_name(self, name: str) -> str:
        return f"listener.name.{self.listener.lower()}.{self.mechanism.lower()}.{name}"


def _plain(ctx: MechanismContext) -> SaslMechanism:
    entry = ctx.jaas()
    if entry is None:
        raise ValueError(
            f"{ctx.setting_name('sasl.jaas.config')} (or sasl.jaas.config) must name PLAIN's "
            'users: org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>="<password>";'
        )
    return PlainMechanism.from_jaas(entry)


def _scram(ctx: MechanismContext) -> SaslMechanism:
    if ctx.credentials is None:
        raise ValueError(f"{ctx.mechanism} needs a SCRAM credential store")
    return ScramMechanism(ctx.mechanism, ctx.credentials)


def _oauthbearer(ctx: MechanismContext) -> SaslMechanism:
    from coordinator.security.oauthbearer import mechanism_from_config
    from coordinator.security.oauthbearer_unsecured import UnsecuredJwtValidator

    # Its sasl.oauthbearer.* settings, scoped to the listener and mechanism like the rest.
    entry = ctx.jaas()
    mechanism = mechanism_from_config(ctx.get, entry.options if entry is not None else None)
    if isinstance(mechanism.validator, UnsecuredJwtValidator):
        log.warning(
            "listener %s: OAUTHBEARER accepts unsecured (unsigned) tokens, Kafka's development "
            "default: anyone can claim any identity. Set sasl.oauthbearer.jwks.endpoint.url "
            "to accept signed tokens only",
            ctx.listener,
        )
    result: SaslMechanism = mechanism
    return result


MechanismFactory = Callable[[MechanismContext], SaslMechanism]
# Every mechanism kgc can offer, by its SASL name.
MECHANISMS: dict[str, MechanismFactory] = {
    "PLAIN": _plain,
    **dict.fromkeys(SCRAM_MECHANISMS, _scram),
    "OAUTHBEARER": _oauthbearer,
}


def _no_metrics(listener: str, mechanism: str, ok: bool) -> None:
    pass


@dataclass(slots=True)
class SaslListener:
    """What one SASL listener authenticates with."""

    listener: str
    mechanisms: dict[str, SaslMechanism]  # enabled, in the configured order
    reauth_ms: dict[str, int] = field(default_factory=dict)  # connections.max.reauth.ms
    failed_authentication_delay_ms: int = 100
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE  # largest frame before authentication
    # (listener, mechanism, succeeded) once per finished exchange (kgc_authentications_total).
    on_authentication: Callable[[str, str, bool], None] = _no_metrics

    def close(self) -> None:
        for mechanism in self.mechanisms.values():
            closer: Any = getattr(mechanism, "close", None)
            if closer is not None:
                closer()


def sasl_listener(
    settings: Settings,
    listener: str,
    *,
    credentials: CredentialStore | None,
    props: Mapping[str, str] | None = None,
) -> SaslListener:
    """Build the SASL side of one listener from Kafka's settings; ValueError (naming the
    setting) when it cannot be."""
    props = props or {}
    scoped = MechanismContext(listener, "", settings, props, credentials)
    enabled_key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
    text = props.get(enabled_key, settings.sasl_enabled_mechanisms)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"sasl.enabled.mechanisms: no SASL mechanism enabled for {listener}")
    mechanisms: dict[str, SaslMechanism] = {}
    reauth: dict[str, int] = {}
    for name in names:
        factory = MECHANISMS.get(name)
        if factory is None:
            raise ValueError(
                f"sasl.enabled.mechanisms: {name} is not supported on {listener} "
                f"(kgc has {', '.join(MECHANISMS)})"
            )
        ctx = MechanismContext(listener, name, settings, props, credentials)
        mechanisms[name] = factory(ctx)
        reauth[name] = _int(ctx, "connections.max.reauth.ms")
    return SaslListener(
        listener=listener,
        mechanisms=mechanisms,
        reauth_ms=reauth,
        failed_authentication_delay_ms=_int(scoped, "connection.failed.authentication.delay.ms"),
        max_receive_size=_int(scoped, "sasl.server.max.receive.size"),
    )


def _int(ctx: MechanismContext, name: str) -> int:
    value = ctx.get(name)
    try:
        result = int(value) if value is not None else -1
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if result < 0:
        raise ValueError(f"{name}: must be at least 0, got {value!r}")
    return result


def attach_sasl(server: Any, settings: Settings, credentials: CredentialStore | None) -> None:
    """Give every SASL_PLAINTEXT/SASL_SSL listener of ``server`` (a KafkaServer) its
    ``SaslListener``; a mechanism that cannot be built stops start-up with one line."""
    for listening in server.listenings:
        if not str(listening.security_protocol).startswith("SASL_"):
            continue
        try:
            server.sasl[listening.name] = sasl_listener(
                settings,
                listening.name,
                credentials=credentials,
                props=settings.listener_name_configs,
            )
        except ValueError as exc:
            raise SystemExit(f"invalid configuration: {exc}") from None
