"""One settings model for kgc: command line, ``KGC_*`` environment, properties file.

How this works: every setting is a field of ``Settings`` named after Kafka's property with
dots turned into underscores (``group.initial.rebalance.delay.ms`` is
``group_initial_rebalance_delay_ms``). Sources, strongest first: command-line flags
(``--group-initial-rebalance-delay-ms``), environment (``KGC_GROUP_INITIAL_REBALANCE_DELAY_MS``),
a Java properties file (``--config server.properties``) using Kafka's own names, then
the defaults below. Invalid values fail at start-up with one line naming the setting.

A ``server.properties`` written for Kafka starts kgc (``read_properties``): the file is read
with a Java properties parser (``key=value``, ``key: value``, ``key value``, continuation
lines, ``\\uXXXX`` and other escapes, ``#``/``!`` comments); Kafka names kgc honours under
another setting are read as Kafka reads them (``log.dirs``/``log.dir`` as ``data.dir``,
``broker.id`` as ``node.id``, ``log.retention.hours``/``minutes`` and ``log.roll.hours`` as
milliseconds, with Kafka's precedence); the listeners named by ``controller.listener.names``
are not bound (kgc runs no KRaft controller); other Kafka settings
(``coordinator.kafka_broker_configs``) are ignored and listed once at start, and names
neither Kafka nor kgc knows are warned about, as Kafka warns about unused settings. kgc's
own logging settings are ``kgc.log.format``/``kgc.log.level``: Kafka's ``log.*`` names are
its data log's, so the old ``log.format``/``log.level`` (flags ``--log-format``/
``--log-level``, environment ``KGC_LOG_FORMAT``/``KGC_LOG_LEVEL``) are still accepted with a
deprecation line. ``KGC_*`` variables that name no setting are warned about. At start
(``log_startup``) these lines are logged with the effective configuration: every setting
that differs from its default, secrets (passwords, JAAS configs, keys, the database URL's
password) hidden.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from coordinator.kafka_broker_configs import is_kafka_broker_config
from storage.local.log import LogConfig
from storage.postgres import redact_url

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's default listener.security.protocol.map: each protocol is a listener name too.
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KGC_", extra="forbid", validate_default=True)

    # -- server
    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(9092, ge=0, le=65535, description="port to listen on (0 = any free port)")
    advertised_host: str | None = Field(
        None, description="host given to clients in Metadata (default: host)"
    )
    advertised_port: int | None = Field(
        None, ge=1, le=65535, description="port given to clients (default: the bound port)"
    )
    node_id: int = Field(0, ge=0, description="this broker's node id (distinct per cluster node)")
    listeners: str | None = Field(
        None,
        description="listeners to bind, Kafka syntax NAME://host:port,... (overrides host/port)",
    )
    advertised_listeners: str | None = Field(
        None,
        description="listeners given to clients, NAME://host:port,... (default: listeners)",
    )
    listener_security_protocol_map: str = Field(
        DEFAULT_PROTOCOL_MAP,
        description="listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
    )
    inter_broker_listener_name: str | None = Field(
        None, description="accepted for Kafka compatibility; kgc nodes do not talk to each other"
    )
    controller_listener_names: str | None = Field(
        None,
        description="listeners of Kafka's KRaft controller: kgc has none and does not bind them",
    )
    # Kafka's per-listener settings, listener.name.<listener>.<setting> (the listener name
    # in lower case): they override the unprefixed setting on that listener only. A
    # properties file gives them one per line; the environment and the command line as a
    # JSON object of Kafka names.
    listener_name_configs: dict[str, str] = Field(
        default_factory=dict,
        description="listener.name.<listener>.<setting>=value overrides, as a JSON object",
    )

    # -- TLS (Kafka's ssl.* names and defaults; listener.name.<listener>.ssl.* per listener)
    ssl_keystore_type: str = Field("JKS", description="keystore format: PEM or PKCS12")
    ssl_keystore_location: str | None = Field(
        None, description="keystore file (PEM: the private key and the certificate chain)"
    )
    ssl_keystore_password: str | None = Field(None, description="password of a PKCS12 keystore")
    ssl_keystore_certificate_chain: str | None = Field(
        None, description="inline PEM certificate chain (with ssl.keystore.type=PEM)"
    )
    ssl_keystore_key: str | None = Field(
        None, description="inline PEM private key (with ssl.keystore.type=PEM)"
    )
    ssl_key_password: str | None = Field(None, description="password of an encrypted private key")
    ssl_truststore_type: str = Field("JKS", description="truststore format: PEM or PKCS12")
    ssl_truststore_location: str | None = Field(
        None, description="certificates trusted to sign client certificates"
    )
    ssl_truststore_password: str | None = Field(None, description="password of a PKCS12 truststore")
    ssl_truststore_certificates: str | None = Field(
        None, description="inline PEM trusted certificates (with ssl.truststore.type=PEM)"
    )
    ssl_client_auth: Literal["none", "requested", "required"] = Field(
        "none", description="ask TLS clients for a certificate: none, requested or required"
    )
    ssl_enabled_protocols: str = Field("TLSv1.2,TLSv1.3", description="TLS versions allowed")
    ssl_protocol: str = Field("TLSv1.3", description="accepted for Kafka compatibility")
    ssl_cipher_suites: str | None = Field(
        None, description="cipher suites allowed (IANA or OpenSSL names; default: OpenSSL's)"
    )
    ssl_principal_mapping_rules: str = Field(
        "DEFAULT", description="rules mapping a client certificate's subject to a principal"
    )
    ssl_endpoint_identification_algorithm: str = Field(
        "https", description="accepted for Kafka compatibility (a client-side setting)"
    )
    broker_rack: str | None = Field(None, description="rack reported in Metadata")
    cluster_id: str = Field("kgc-cluster-0000000000", description="cluster id reported in Metadata")
    data_dir: Path = Field(Path("./kgc-data"), description="where logs and the topic catalog live")
    socket_request_max_bytes: int = Field(
        104857600, ge=1024, description="largest request frame accepted"
    )
    # Kafka's default is 500; kgc counts the requests read but not yet answered that wait
    # on its own work (a commit or produce waiting for its fsync), not those parked until
    # other clients act (JoinGroup, SyncGroup, a long-polling Fetch), as Kafka does not.
    queued_max_requests: int = Field(
        500, ge=1, description="requests read but not yet answered before no more are read"
    )
    # Kafka's default is -1 (no limit). kgc bounds it: 256 MiB holds two requests of the
    # largest size (socket.request.max.bytes, 100 MiB) with room for ordinary traffic.
    # Queued requests then hold at most this plus 1 MiB (or a quarter of it plus one
    # request larger than the rest allows, which is still served when no other large one
    # is queued); see coordinator/server/memory.py RequestQueue. -1 turns the limit off.
    queued_max_request_bytes: int = Field(
        268435456,
        ge=-1,
        description="bytes of requests read but not yet answered before no more are read (-1 = no limit)",
    )
    metrics_port: int = Field(
        9404, ge=0, le=65535, description="Prometheus endpoint port (0 = off)"
    )
    # Each (group, topic, partition) with a committed offset is one lag series (its committed
    # offset, lag and lag seconds); past this many, new ones are left out and counted.
    metrics_lag_max_series: int = Field(
        10000, ge=0, description="most consumer-lag series exported (0 = no lag metrics)"
    )
    # kgc's own logging (not Kafka's log.*, which name the data log); formerly log.format
    # and log.level, still accepted with a deprecation line.
    kgc_log_format: Literal["text", "json"] = Field(
        "text", description="kgc's log line format: text or json"
    )
    kgc_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="kgc's log level"
    )
    # kgc's own: Python runs one process on one core (the GIL). With N > 1, ``kgc serve``
    # supervises N worker processes on the data directory, each a broker of its own (node
    # id node.id + i, every listener's port + i) leading a fixed share of the partitions;
    # see coordinator/workers. 1 is one process, as before.
    kgc_workers: int = Field(
        1,
        ge=1,
        le=64,
        description="worker processes of this node (each its own broker on port + i; 1 = one process)",
    )

    # -- group coordinator (Kafka names and defaults)
    group_min_session_timeout_ms: int = Field(
        6000, ge=0, description="smallest session timeout a member may ask for"
    )
    group_max_session_timeout_ms: int = Field(
        1800000, ge=0, description="largest session timeout a member may ask for"
    )
    group_initial_rebalance_delay_ms: int = Field(
        3000, ge=0, description="wait for more members before the first rebalance of an empty group"
    )
    group_max_size: int = Field(2147483647, ge=1, description="most members a group may hold")
    # -- consumer groups (KIP-848), Kafka's group.consumer.* names and defaults
    group_consumer_session_timeout_ms: int = Field(
        45000, ge=1, description="session timeout of consumer-protocol members"
    )
    group_consumer_min_session_timeout_ms: int = Field(
        45000, ge=1, description="smallest group.consumer.session.timeout.ms allowed"
    )
    group_consumer_max_session_timeout_ms: int = Field(
        60000, ge=1, description="largest group.consumer.session.timeout.ms allowed"
    )
    group_consumer_heartbeat_interval_ms: int = Field(
        5000, ge=1, description="how often consumer-protocol members heartbeat"
    )
    group_consumer_min_heartbeat_interval_ms: int = Field(
        5000, ge=1, description="smallest group.consumer.heartbeat.interval.ms allowed"
    )
    group_consumer_max_heartbeat_interval_ms: int = Field(
        15000, ge=1, description="largest group.consumer.heartbeat.interval.ms allowed"
    )
    group_consumer_max_size: int = Field(
        2147483647, ge=1, description="most members a consumer group may hold"
    )
    group_consumer_assignors: str = Field(
        "uniform,range", description="server-side assignors; the first is the default"
    )
    group_consumer_migration_policy: Literal[
        "bidirectional", "upgrade", "downgrade", "disabled"
    ] = Field(
        "bidirectional",
        description="which classic<->consumer conversions of non-empty groups are allowed",
    )
    offsets_topic_num_partitions: int = Field(50, ge=1, description="partitions of the offsets log")
    offsets_topic_segment_bytes: int = Field(
        104857600, ge=1024, description="segment size of the offsets log"
    )
    offset_metadata_max_bytes: int = Field(4096, ge=0, description="longest commit metadata string")
    offsets_retention_minutes: int = Field(
        10080, ge=1, description="how long offsets of an empty group are kept"
    )
    offsets_retention_check_interval_ms: int = Field(
        600000, ge=1, description="how often expired offsets are looked for"
    )

    # -- log engine
    log_segment_bytes: int = Field(1073741824, ge=1024, description="segment size of topic logs")
    log_roll_ms: int = Field(604800000, ge=1, description="roll a segment after this age")
    log_retention_ms: int = Field(
        604800000, ge=-1, description="topic data retention by time (-1 = forever)"
    )
    log_retention_bytes: int = Field(
        -1, ge=-1, description="topic data retention by size per partition (-1 = none)"
    )
    log_cleaner_delete_retention_ms: int = Field(
        86400000, ge=0, description="how long tombstones survive compaction"
    )
    log_cleaner_backoff_ms: int = Field(15000, ge=1, description="pause between compaction passes")
    log_flush_policy: Literal["batch", "interval", "none"] = Field(
        "batch", description="fsync every write batch (group commit), on an interval, or never"
    )
    log_flush_interval_ms: int = Field(
        1000, ge=1, description="fsync interval for the 'interval' policy"
    )
    log_flush_interval_messages: int = Field(
        10000, ge=1, description="fsync after this many messages for the 'interval' policy"
    )
    message_max_bytes: int = Field(1048588, ge=1, description="largest record batch accepted")

    # -- cluster mode (several nodes on one PostgreSQL database; see README "Cluster mode")
    storage_url: str | None = Field(
        None,
        description="postgresql://user:pass@host:port/db puts the log in PostgreSQL and makes "
        "this node part of the cluster on that database (default: the local log only)",
    )
    broker_heartbeat_interval_ms: int = Field(
        2000, ge=10, description="how often a node heartbeats to the cluster"
    )
    broker_session_timeout_ms: int = Field(
        9000, ge=100, description="a node silent this long loses its partitions to others"
    )

    # -- authorization (Kafka's ACLs; coordinator/security/acl.py)
    authorizer_class_name: str = Field(
        "",
        description="ACL authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer "
        "(or kafka.security.authorizer.AclAuthorizer, the same here); empty = allow everything",
    )
    super_users: str = Field(
        "", description="principals allowed everything, e.g. User:admin;User:ops"
    )
    allow_everyone_if_no_acl_found: bool = Field(
        False, description="allow a resource that no ACL matches to everyone"
    )

    @field_validator("authorizer_class_name")
    @classmethod
    def _known_authorizer(cls, value: str) -> str:
        value = value.strip()
        if value and value not in AUTHORIZER_CLASSES:
            raise ValueError(f"kgc's authorizer is {AUTHORIZER_CLASSES[0]} (or empty for none)")
        return value

    @field_validator("super_users")
    @classmethod
    def _principals(cls, value: str) -> str:
        from coordinator.security.acl import parse_super_users

        parse_super_users(value)
        return value

    # -- topics
    auto_create_topics_enable: bool = Field(
        True, description="create unknown topics on Metadata/Produce"
    )
    num_partitions: int = Field(1, ge=1, description="partitions of auto-created topics")

    # -- SASL (Kafka's names and defaults; scoped per listener as
    # listener.name.<listener>.<mechanism>.<name>, see coordinator/security/sasl)
    sasl_enabled_mechanisms: str = Field(
        "GSSAPI",
        description="SASL mechanisms a SASL listener offers (PLAIN, SCRAM-SHA-*, OAUTHBEARER)",
    )
    sasl_jaas_config: str | None = Field(
        None, description='JAAS line of the mechanism (PLAIN\'s users: user_<name>="<password>")'
    )
    sasl_server_max_receive_size: int = Field(
        524288, ge=1, description="largest frame read before a connection has authenticated"
    )
    connections_max_reauth_ms: int = Field(
        0, ge=0, description="longest SASL session before re-authentication (KIP-368; 0 = none)"
    )
    connection_failed_authentication_delay_ms: int = Field(
        100, ge=0, description="delay before a connection that failed authentication is closed"
    )
    connections_max_idle_ms: int = Field(
        600000,
        ge=1,
        description="a connection idle this long (nothing read, nothing awaited) is closed",
    )

    # -- SASL/OAUTHBEARER token validation (KIP-768 names and defaults)
    sasl_oauthbearer_jwks_endpoint_url: str | None = Field(
        None, description="JWKS with the token signing keys: https://, http:// or file: URL"
    )
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = Field(
        3600000, ge=1, description="how often an http(s) JWKS is fetched again"
    )
    sasl_oauthbearer_jwks_endpoint_retry_backoff_ms: int = Field(
        100, ge=0, description="first wait between failed JWKS fetch attempts"
    )
    sasl_oauthbearer_jwks_endpoint_retry_backoff_max_ms: int = Field(
        10000, ge=0, description="longest total retrying of one JWKS refresh"
    )
    sasl_oauthbearer_expected_audience: str | None = Field(
        None, description="comma-separated audiences a token's aud must contain one of"
    )
    sasl_oauthbearer_expected_issuer: str | None = Field(
        None, description="the iss a token must carry"
    )
    sasl_oauthbearer_clock_skew_seconds: int = Field(
        30, ge=0, description="tolerance on exp/nbf for clock differences with the issuer"
    )
    sasl_oauthbearer_sub_claim_name: str = Field(
        "sub", min_length=1, description="claim that names the principal (User:<value>)"
    )
    sasl_oauthbearer_scope_claim_name: str = Field(
        "scope", min_length=1, description="claim holding the token's scopes"
    )

    @field_validator("listener_name_configs", mode="before")
    @classmethod
    def _listener_name_configs(cls, value: Any) -> Any:
        # From the command line: a JSON object of Kafka names.
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"expected a JSON object: {exc}") from None
        return value

    # What loading found besides values (ignored, unknown, deprecated names): log_startup.
    _notes: ConfigNotes = PrivateAttr(default_factory=lambda: ConfigNotes())

    @model_validator(mode="after")
    def _check(self) -> Settings:
        self._drop_controller_listeners()
        if self.queued_max_request_bytes == 0:
            raise ValueError("queued.max.request.bytes must be positive, or -1 for no limit")
        if self.storage_url is not None and not self.storage_url.startswith(
            ("postgresql://", "postgres://")
        ):
            raise ValueError("storage.url must be a postgresql:// URL")
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ValueError(
                "broker.heartbeat.interval.ms must be less than broker.session.timeout.ms"
            )
        self._check_listeners()
        self._check_workers()
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        self._check_consumer_groups()
        url = self.sasl_oauthbearer_jwks_endpoint_url
        if url is not None and not url.lower().startswith(("http://", "https://", "file:")):
            raise ValueError(
                'sasl.oauthbearer.jwks.endpoint.url: only "http", "https" and "file" URLs '
                "are supported"
            )
        return self

    def _drop_controller_listeners(self) -> None:
        """Kafka binds ``controller.listener.names`` for its KRaft controller and keeps them
        out of what brokers advertise; kgc has no controller, so it leaves them out of both
        (a combined broker+controller ``server.properties`` names one)."""
        names = {
            n.strip().upper()
            for n in (self.controller_listener_names or "").split(",")
            if n.strip()
        }
        if not names:
            return
        for attr in ("listeners", "advertised_listeners"):
            value = getattr(self, attr)
            if value is None:
                continue
            kept = [
                item.strip()
                for item in value.split(",")
                if item.strip() and item.strip().partition("://")[0].upper() not in names
            ]
            if attr == "listeners" and not kept:
                raise ValueError(
                    "listeners: every listener is a controller listener "
                    "(controller.listener.names); kgc needs one for clients"
                )
            setattr(self, attr, ",".join(kept) or None)

    def _check_workers(self) -> None:
        """kgc.workers > 1: worker i listens on every listener's port + i and is advertised
        so (coordinator/workers), which needs fixed ports; cluster mode scales by nodes."""
        n = self.kgc_workers
        if n == 1:
            return
        if self.storage_url is not None:
            raise ValueError(
                "kgc.workers > 1 runs several processes on one data directory; in cluster mode "
                "(storage.url) run more nodes instead"
            )
        ports = [("listeners" if self.listeners else "port", s.port) for s in self.listener_specs]
        if self.advertised_listeners is not None:
            ports += [
                ("advertised.listeners", p)
                for _, _, p in parse_listeners(self.advertised_listeners, "advertised.listeners")
            ]
        if self.advertised_port is not None:
            ports.append(("advertised.port", self.advertised_port))
        if self.metrics_port:
            ports.append(("metrics.port", self.metrics_port))
        for name, port in ports:
            if port == 0:
                raise ValueError(
                    f"kgc.workers={n} needs fixed ports (worker i uses port + i), but {name} "
                    "has port 0"
                )
            if port + n - 1 > 65535:
                raise ValueError(f"kgc.workers={n}: {name} port {port} + {n - 1} is past 65535")

    def _check_consumer_groups(self) -> None:
        """Kafka's GroupCoordinatorConfig requirements on the group.consumer.* settings."""
        for what in ("session_timeout_ms", "heartbeat_interval_ms"):
            lo = getattr(self, f"group_consumer_min_{what}")
            hi = getattr(self, f"group_consumer_max_{what}")
            value = getattr(self, f"group_consumer_{what}")
            name = "group.consumer." + what.replace("_", ".")
            if hi < lo:
                raise ValueError(
                    f"group.consumer.max.{what.replace('_', '.')} must be greater than or "
                    f"equal to group.consumer.min.{what.replace('_', '.')}"
                )
            if not lo <= value <= hi:
                raise ValueError(
                    f"{name} must be between group.consumer.min.{what.replace('_', '.')} "
                    f"and group.consumer.max.{what.replace('_', '.')}"
                )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be less than "
                "group.consumer.session.timeout.ms"
            )
        names = self.consumer_group_assignors
        if not names:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        if len(set(names)) != len(names):
            raise ValueError("group.consumer.assignors must not contain duplicate assignors")
        from coordinator.group.consumer.assignors import BUILTIN_ASSIGNORS

        unknown = [n for n in names if n not in BUILTIN_ASSIGNORS]
        if unknown:
            raise ValueError(
                f"group.consumer.assignors: unknown assignor {unknown[0]!r} "
                f"(kgc has {', '.join(BUILTIN_ASSIGNORS)})"
            )

    def _check_listeners(self) -> None:
        """Kafka's rules: every listener has a protocol, names and ports are distinct, the
        advertised listeners are listeners; principal mapping rules parse."""
        from coordinator.security.principal_mapping import SslPrincipalMapper

        _ = self.security_protocol_map  # parses, even when only host/port are used
        specs = self.listener_specs
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError("listeners: each listener must have a different name")
        ports = [spec.port for spec in specs if spec.port != 0]
        if len(set(ports)) != len(ports):
            raise ValueError("listeners: each listener must have a different port")
        if self.advertised_listeners is not None:
            advertised = parse_listeners(self.advertised_listeners, "advertised.listeners")
            unknown = [a[0] for a in advertised if a[0] not in names]
            if unknown:
                raise ValueError(
                    f"advertised.listeners: listener {unknown[0]} is not in listeners "
                    f"({', '.join(names)})"
                )
        for key in self.listener_name_configs:
            if not key.startswith("listener.name.") or "." not in key[len("listener.name.") :]:
                raise ValueError(f"{key}: expected listener.name.<listener>.<setting>")
        for spec in specs:
            rules = self.listener_config(spec.name, "ssl.principal.mapping.rules")
            try:
                SslPrincipalMapper(str(rules))
            except ValueError as exc:
                raise ValueError(
                    f"{self.listener_setting_name(spec.name, 'ssl.principal.mapping.rules')}: {exc}"
                ) from None

    @property
    def security_protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as {listener name: security protocol}."""
        out: dict[str, str] = {}
        for item in self.listener_security_protocol_map.split(","):
            if not item.strip():
                continue
            name, sep, proto = item.strip().partition(":")
            proto = proto.strip().upper()
            if not sep or not name.strip() or proto not in SECURITY_PROTOCOLS:
                raise ValueError(
                    f"listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one "
                    f"of {', '.join(SECURITY_PROTOCOLS)}, got {item.strip()!r}"
                )
            out[name.strip().upper()] = proto
        return out

    @property
    def listener_specs(self) -> list[ListenerSpec]:
        """The listeners to bind: ``listeners``, else PLAINTEXT on ``host``:``port``."""
        if self.listeners is None:
            return [ListenerSpec("PLAINTEXT", self.host, self.port, "PLAINTEXT")]
        protocols = self.security_protocol_map
        specs = []
        for name, host, port in parse_listeners(self.listeners, "listeners"):
            proto = protocols.get(name)
            if proto is None:
                raise ValueError(
                    f"listeners: no security protocol defined for listener {name} "
                    "(listener.security.protocol.map)"
                )
            specs.append(ListenerSpec(name, host or "0.0.0.0", port, proto))
        return specs

    def listener_setting_name(self, listener: str, name: str) -> str:
        """The Kafka name of a setting scoped to a listener (``listener.name.ssl.ssl.x``)."""
        return f"listener.name.{listener.lower()}.{name}"

    def listener_config(self, listener: str, name: str) -> Any:
        """A setting as a listener sees it: ``listener.name.<listener>.<name>`` when set,
        else the unprefixed setting (Kafka's valuesWithPrefixOverride); None if neither."""
        scoped = self.listener_name_configs.get(self.listener_setting_name(listener, name))
        if scoped is not None:
            return scoped
        field = name.replace(".", "_").replace("-", "_")
        return getattr(self, field, None) if field in type(self).model_fields else None

    def ssl_configs(self, listener: str) -> dict[str, Any]:
        """Every ``ssl.*`` setting as ``listener`` sees it, by Kafka name."""
        names = [kafka_name(f) for f in type(self).model_fields if f.startswith("ssl_")]
        prefix = self.listener_setting_name(listener, "ssl.")
        names += [k[len(prefix) - 4 :] for k in self.listener_name_configs if k.startswith(prefix)]
        return {name: self.listener_config(listener, name) for name in dict.fromkeys(names)}

    @property
    def consumer_group_assignors(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.group_consumer_assignors.split(",") if n.strip())

    @property
    def bind_address(self) -> tuple[str, int]:
        """Where the first listener listens: ``listeners`` when set, else ``host``:``port``."""
        first = self.listener_specs[0]
        return first.host, first.port

    @property
    def cluster_mode(self) -> bool:
        return self.storage_url is not None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, PropertiesSource(settings_cls))


_LISTENER = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener to bind: its name (upper case), address and security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str


def parse_listeners(value: str, name: str = "listeners") -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` (Kafka's syntax) as [(NAME, host, port)]; an empty host
    means every interface, as in Kafka; names are upper-cased, as Kafka normalises them."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        m = _LISTENER.match(item)
        if m is None or not m.group(1) or not 0 <= int(m.group(3)) <= 65535:
            raise ValueError(f"{name}: expected NAME://host:port, got {item!r}")
        out.append((m.group(1).upper(), m.group(2), int(m.group(3))))
    if not out:
        raise ValueError(f"{name}: no listener in {value!r}")
    return out


def parse_listener(value: str, name: str = "listeners") -> tuple[str, int]:
    """The (host, port) of the first listener of ``value`` (an empty host: every interface)."""
    _, host, port = parse_listeners(value, name)[0]
    return (host or "0.0.0.0"), port


_PROPERTIES_PATH: Path | None = None
# The notes of the properties file being read by a Settings() under construction.
_READING_NOTES: ConfigNotes | None = None

log = logging.getLogger("kgc.config")


@dataclass
class ConfigNotes:
    """What loading the configuration found besides values, logged once at start."""

    ignored: list[str] = field(default_factory=list)  # Kafka settings meaningless for kgc
    unknown: list[str] = field(default_factory=list)  # names neither Kafka nor kgc knows
    unknown_env: list[str] = field(default_factory=list)  # KGC_* naming no setting, with a hint
    deprecated: list[str] = field(default_factory=list)  # "old (now new)"
    warnings: list[str] = field(default_factory=list)  # other one-line warnings
    # Setting -> the name it was given under in the properties file, when not its own
    # (log.dirs for data_dir): errors name what the user wrote.
    file_names: dict[str, str] = field(default_factory=dict)


# Old names of kgc's settings, still accepted: {old Kafka-style name: field}.
DEPRECATED_NAMES = {"log.format": "kgc_log_format", "log.level": "kgc_log_level"}
# Kafka names kgc reads into another setting, strongest first (Kafka's order), and the
# factor to milliseconds where Kafka converts (ServerTopicConfigSynonyms, KafkaConfig).
SYNONYMS: dict[str, list[tuple[str, int]]] = {
    "data_dir": [("data.dir", 0), ("log.dirs", 0), ("log.dir", 0)],
    "node_id": [("node.id", 0), ("broker.id", 0)],
    "log_retention_ms": [
        ("log.retention.ms", 0),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ],
    "log_roll_ms": [("log.roll.ms", 0), ("log.roll.hours", 3_600_000)],
}
_SYNONYM_OF = {name: f for f, names in SYNONYMS.items() for name, _ in names[1:]}
# Environment variables kgc's operator commands read (tools.commands.common), not settings.
TOOL_ENVIRONMENT = frozenset({"KGC_BOOTSTRAP_SERVER", "KGC_COMMAND_CONFIG"})
_JAVA_INT = re.compile(r"^[+-]?[0-9]+$")


class PropertiesSource(PydanticBaseSettingsSource):
    """The properties file (``--config``), Kafka's dotted names; see ``read_properties``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if _PROPERTIES_PATH is None:
            return {}
        values, notes = read_properties(_PROPERTIES_PATH)
        if _READING_NOTES is not None:
            _READING_NOTES.ignored += notes.ignored
            _READING_NOTES.unknown += notes.unknown
            _READING_NOTES.deprecated += notes.deprecated
            _READING_NOTES.warnings += notes.warnings
            _READING_NOTES.file_names.update(notes.file_names)
        return values


def load_properties(path: Path) -> dict[str, str]:
    """A Java properties file as {key: value}, the last of a repeated key winning as in Java.

    Java reads ``server.properties`` as ISO-8859-1 (non-ASCII as ``\\uXXXX``); a UTF-8 file
    is read as UTF-8, so a value typed with accents means what it shows.
    """
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    # Imported here: only a properties file needs it (~25 ms of every start otherwise).
    import javaproperties

    return dict(javaproperties.loads(text))


def read_properties(path: Path) -> tuple[dict[str, Any], ConfigNotes]:
    """The settings a Kafka ``server.properties`` gives kgc, and what else it holds.

    Values are trimmed, as Kafka's ConfigDef trims them. Raises ``ValueError`` naming the
    setting when a Kafka synonym kgc converts (``log.retention.hours``) is not a number.
    """
    props = {key: value.strip() for key, value in load_properties(path).items()}
    notes = ConfigNotes()
    out: dict[str, Any] = {}
    for target, names in SYNONYMS.items():
        present = [(name, factor) for name, factor in names if name in props]
        if not present:
            continue
        name, factor = present[0]
        value: Any = props[name]
        if name in ("log.dirs", "log.dir"):
            dirs = [d.strip() for d in value.split(",") if d.strip()]
            if not dirs:
                raise ValueError(f"invalid setting {name}: no directory (got {value!r})")
            if len(dirs) > 1:
                notes.warnings.append(
                    f"{name} names {len(dirs)} directories; kgc keeps its data in one, the "
                    f"first: {dirs[0]} (not used: {', '.join(dirs[1:])})"
                )
            value = dirs[0]
        elif factor:
            value = _java_int(name, value) * factor
            if name == "log.roll.hours" and value < factor:
                raise ValueError(
                    f"invalid setting {name}: must be at least 1 (got {props[name]!r})"
                )
            value = max(value, -1)  # Kafka: any negative retention means unlimited (-1)
        if target == "node_id" and props.get("broker.id", value) != value:
            # Kafka's rule: broker.id is another name for node.id, so both must agree.
            raise ValueError("invalid configuration: node.id must be the same as broker.id")
        out[target] = value
        if name != kafka_name(target):
            notes.file_names[target] = name
    for key, value in props.items():
        if key.startswith("listener.name."):  # per-listener: Settings.listener_config
            out.setdefault("listener_name_configs", {})[key] = value
            continue
        if key in _SYNONYM_OF or any(key == n for names in SYNONYMS.values() for n, _ in names):
            continue
        if key in DEPRECATED_NAMES:
            new = DEPRECATED_NAMES[key]
            notes.deprecated.append(f"{key} (now {kafka_name(new)})")
            if kafka_name(new) not in props:
                out[new] = value
                notes.file_names[new] = key
            continue
        name = key.replace(".", "_").replace("-", "_")
        if name in Settings.model_fields and name != "listener_name_configs":
            out[name] = value
        elif is_kafka_broker_config(key):
            notes.ignored.append(key)
        else:
            notes.unknown.append(key)
    return out, notes


def _java_int(name: str, value: str) -> int:
    """Kafka's INT type: a 32-bit integer, else the setting is invalid."""
    if not _JAVA_INT.match(value) or not -(2**31) <= int(value) < 2**31:
        raise ValueError(f"invalid setting {name}: not a 32-bit integer (got {value!r})")
    return int(value)


def kafka_name(field_name: str) -> str:
    return field_name.replace("_", ".")


# Old flags of kgc's own settings, still accepted: {flag: field}.
DEPRECATED_FLAGS = {"--log-format": "kgc_log_format", "--log-level": "kgc_log_level"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per setting, documented with its Kafka name and default."""
    parser.add_argument("--config", type=Path, help="properties file with Kafka-style settings")
    for name, info in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = info.default
        helptext = (
            f"{info.description} [{kafka_name(name)}; env KGC_{name.upper()}; default: {default}]"
        )
        parser.add_argument(flag, dest=name, default=None, help=helptext)
    for flag in DEPRECATED_FLAGS:
        parser.add_argument(flag, dest=_deprecated_dest(flag), default=None, help=argparse.SUPPRESS)


def _deprecated_dest(flag: str) -> str:
    return "deprecated_" + flag.removeprefix("--").replace("-", "_")


def _environment(notes: ConfigNotes, overrides: dict[str, Any]) -> None:
    """Check the ``KGC_*`` variables: deprecated names are taken (below the new name's
    variable and the flags), names of no setting are noted with a hint."""
    env = {k.upper(): v for k, v in os.environ.items() if k.upper().startswith("KGC_")}
    for var in sorted(env):
        name = var.removeprefix("KGC_").lower()
        if name in Settings.model_fields or var in TOOL_ENVIRONMENT:
            continue
        old = name.replace("_", ".")
        if old in DEPRECATED_NAMES:
            new = DEPRECATED_NAMES[old]
            notes.deprecated.append(f"{var} (now KGC_{new.upper()})")
            if new not in overrides and f"KGC_{new.upper()}" not in env:
                overrides[new] = env[var]
            continue
        target = _SYNONYM_OF.get(old)
        if target is not None:
            notes.unknown_env.append(f"{var} (in the environment it is KGC_{target.upper()})")
        elif is_kafka_broker_config(old):
            notes.unknown_env.append(f"{var} ({old} means nothing for kgc)")
        else:
            notes.unknown_env.append(var)


def load(args: argparse.Namespace | None = None) -> Settings:
    """Build the settings from parsed flags, the environment and the properties file.

    Raises ``SystemExit`` with one line per invalid setting, named as Kafka names it (or as
    the properties file named it). What else was found is logged by ``log_startup``.
    """
    global _PROPERTIES_PATH, _READING_NOTES
    notes = ConfigNotes()
    overrides: dict[str, Any] = {}
    if args is not None:
        _PROPERTIES_PATH = getattr(args, "config", None)
        for name in Settings.model_fields:
            value = getattr(args, name, None)
            if value is not None:
                overrides[name] = value
        for flag, new in DEPRECATED_FLAGS.items():
            value = getattr(args, _deprecated_dest(flag), None)
            if value is not None:
                notes.deprecated.append(f"{flag} (now --{new.replace('_', '-')})")
                overrides.setdefault(new, value)
    _environment(notes, overrides)
    _READING_NOTES = notes
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if not loc:
                # A rule across settings (``_check``): its message names them; the input
                # is every setting, which may hold a password (storage.url).
                lines.append(f"invalid configuration: {err['msg'].removeprefix('Value error, ')}")
                continue
            got = err.get("input")
            if loc == "storage_url" and isinstance(got, str):
                got = redact_url(got)
            name = kafka_name(loc)
            if loc not in overrides and f"KGC_{loc.upper()}" not in os.environ:
                name = notes.file_names.get(loc, name)
            lines.append(f"invalid setting {name}: {err['msg']} (got {got!r})")
        raise SystemExit("\n".join(lines)) from None
    except ValueError as exc:
        message = str(exc)
        if not message.startswith(("invalid setting", "invalid configuration")):
            message = f"invalid configuration: {message}"
        raise SystemExit(message) from None
    finally:
        # Only this construction reads the file: a later Settings() is not given it.
        _PROPERTIES_PATH = _READING_NOTES = None
    settings._notes = notes
    return settings


# Settings whose values are secrets (Kafka's PASSWORD type, and JAAS lines that carry
# passwords): the effective configuration shows them as [hidden], as Kafka logs them.
_SECRET = re.compile(r"password|jaas\.config|keystore\.key|certificate|secret|token", re.I)


def _shown(name: str, value: Any) -> str:
    if value is None:
        return "null"
    if name == "storage.url":
        return redact_url(str(value))
    if _SECRET.search(name):
        return "[hidden]"
    return str(value)


def effective_settings(settings: Settings) -> dict[str, str]:
    """Every setting that differs from its default, by Kafka name, secrets hidden."""
    out: dict[str, str] = {}
    for name, info in Settings.model_fields.items():
        value = getattr(settings, name)
        if name == "listener_name_configs":
            for key, scoped in sorted(value.items()):
                out[key] = _shown(key, scoped)
            continue
        default = info.get_default(call_default_factory=True)
        if value != default:
            out[kafka_name(name)] = _shown(kafka_name(name), value)
    return out


def startup_report(settings: Settings) -> list[tuple[int, str]]:
    """The lines ``log_startup`` logs, as (level, message)."""
    notes = settings._notes
    out: list[tuple[int, str]] = []
    if notes.deprecated:
        out.append(
            (logging.WARNING, "deprecated names, still accepted: " + ", ".join(notes.deprecated))
        )
    if notes.unknown:
        out.append(
            (
                logging.WARNING,
                "unknown settings in the properties file, not used: " + ", ".join(notes.unknown),
            )
        )
    if notes.unknown_env:
        out.append(
            (
                logging.WARNING,
                "unknown KGC_* environment variables, not used: " + ", ".join(notes.unknown_env),
            )
        )
    out += [(logging.WARNING, w) for w in notes.warnings]
    if notes.ignored:
        out.append(
            (
                logging.INFO,
                "Kafka settings ignored (they mean nothing for kgc): " + ", ".join(notes.ignored),
            )
        )
    if settings.controller_listener_names:
        out.append(
            (
                logging.INFO,
                f"listeners {settings.controller_listener_names} (controller.listener.names) "
                "are not bound: kgc runs no KRaft controller",
            )
        )
    shown = effective_settings(settings)
    out.append(
        (
            logging.INFO,
            "configuration (settings other than their defaults): "
            + (", ".join(f"{k}={v}" for k, v in shown.items()) or "all defaults"),
        )
    )
    return out


def log_startup(settings: Settings) -> None:
    """Log what loading the configuration found and the effective configuration, once."""
    for level, message in startup_report(settings):
        log.log(level, message)


def log_config(settings: Settings, topic_configs: dict[str, str] | None = None) -> LogConfig:
    """The log-engine settings for a topic: its own configs over the broker defaults."""
    c = topic_configs or {}
    return LogConfig(
        segment_bytes=int(c.get("segment.bytes", settings.log_segment_bytes)),
        segment_ms=int(c.get("segment.ms", settings.log_roll_ms)),
        retention_ms=int(c.get("retention.ms", settings.log_retention_ms)),
        retention_bytes=int(c.get("retention.bytes", settings.log_retention_bytes)),
        cleanup_policy=c.get("cleanup.policy", "delete"),
        delete_retention_ms=int(
            c.get("delete.retention.ms", settings.log_cleaner_delete_retention_ms)
        ),
        min_cleanable_dirty_ratio=float(c.get("min.cleanable.dirty.ratio", 0.5)),
        max_message_bytes=int(c.get("max.message.bytes", settings.message_max_bytes)),
        flush_policy=settings.log_flush_policy,
        flush_interval_ms=settings.log_flush_interval_ms,
        flush_interval_messages=settings.log_flush_interval_messages,
    )


def offsets_log_config(settings: Settings) -> LogConfig:
    """The offsets log is compacted, with Kafka's offsets.topic.segment.bytes segments."""
    cfg = log_config(
        settings,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(settings.offsets_topic_segment_bytes),
            "retention.ms": "-1",
        },
    )
    if settings.cluster_mode:
        # The PostgreSQL journal makes commits durable. The local copy is a cache whose
        # cleaned segments also replace the database's rows (storage/postgres/compaction.py),
        # and the cleaner only takes rolled segments: small, time-bounded segments keep the
        # database's share of an offsets partition, and so a failover's load, small.
        return replace(
            cfg,
            segment_bytes=min(cfg.segment_bytes, CLUSTER_OFFSETS_SEGMENT_BYTES),
            segment_ms=min(cfg.segment_ms, CLUSTER_OFFSETS_SEGMENT_MS),
        )
    # Commits touch many of the 50 partitions at once: one journal fsync covers them all.
    return replace(cfg, journaled=True)


CLUSTER_OFFSETS_SEGMENT_BYTES = 8 << 20
CLUSTER_OFFSETS_SEGMENT_MS = 600_000
# authorizer.class.name values kgc accepts: Kafka's KRaft authorizer and the ZooKeeper-era
# one (a stock server.properties names either); both mean Kafka's ACL semantics.
AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
