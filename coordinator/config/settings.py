"""The ``Settings`` model: every setting of kgc, its default and its validation.

How this works: every setting is a field of ``Settings`` named after Kafka's property with
dots turned into underscores (``group.initial.rebalance.delay.ms`` is
``group_initial_rebalance_delay_ms``), filled from the sources sources.py and properties.py
read. Field constraints check single values; ``_check`` checks the rules across settings
(listeners, workers, consumer-group bounds) and raises one line naming the settings. Values
whose syntax belongs to the security layer (``super.users``, principal mapping rules) are
kept as strings here and checked by ``coordinator.security.settings_check``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from coordinator.config.properties import ConfigNotes, PropertiesSource, kafka_name

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
        None,
        description="listener the cluster's nodes reach each other on (default: the first)",
    )
    sasl_mechanism_inter_broker_protocol: str = Field(
        "GSSAPI",
        description="SASL mechanism of the inter-broker client on a SASL listener (PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512; its JAAS username/password)",
    )
    request_timeout_ms: int = Field(
        30000, ge=1, description="longest wait for a peer node's answer (inter-broker client)"
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
    # -- share groups (KIP-932), Kafka's group.share.* membership names and defaults
    group_share_session_timeout_ms: int = Field(
        45000, ge=1, description="session timeout of share group members"
    )
    group_share_min_session_timeout_ms: int = Field(
        45000, ge=1, description="smallest share.session.timeout.ms of a group"
    )
    group_share_max_session_timeout_ms: int = Field(
        60000, ge=1, description="largest share.session.timeout.ms of a group"
    )
    group_share_heartbeat_interval_ms: int = Field(
        5000, ge=1, description="how often share group members heartbeat"
    )
    group_share_min_heartbeat_interval_ms: int = Field(
        5000, ge=1, description="smallest share.heartbeat.interval.ms of a group"
    )
    group_share_max_heartbeat_interval_ms: int = Field(
        15000, ge=1, description="largest share.heartbeat.interval.ms of a group"
    )
    group_share_max_size: int = Field(
        200, ge=1, le=1000, description="most members a share group may hold"
    )
    group_share_min_delivery_count_limit: int = Field(
        2, ge=2, le=10, description="smallest share.delivery.count.limit of a group"
    )
    group_share_max_delivery_count_limit: int = Field(
        10, ge=2, le=10, description="largest share.delivery.count.limit of a group"
    )
    group_consumer_migration_policy: Literal[
        "bidirectional", "upgrade", "downgrade", "disabled"
    ] = Field(
        "bidirectional",
        description="which classic<->consumer conversions of non-empty groups are allowed",
    )
    # -- streams groups (KIP-1071), Kafka's group.streams.* names and defaults
    group_streams_session_timeout_ms: int = Field(
        45000, ge=1, description="session timeout of streams-protocol members"
    )
    group_streams_min_session_timeout_ms: int = Field(
        45000, ge=1, description="smallest streams.session.timeout.ms a group may set"
    )
    group_streams_max_session_timeout_ms: int = Field(
        60000, ge=1, description="largest streams.session.timeout.ms a group may set"
    )
    group_streams_min_heartbeat_interval_ms: int = Field(
        5000, ge=1, description="smallest streams.heartbeat.interval.ms a group may set"
    )
    group_streams_max_heartbeat_interval_ms: int = Field(
        15000, ge=1, description="largest streams.heartbeat.interval.ms a group may set"
    )
    group_streams_heartbeat_interval_ms: int = Field(
        5000, ge=1, description="how often streams-protocol members heartbeat"
    )
    group_streams_max_size: int = Field(
        2147483647, ge=1, description="most members a streams group may hold"
    )
    group_streams_num_standby_replicas: int = Field(
        0, ge=0, description="standby replicas of each stateful task of a streams group"
    )
    group_streams_max_standby_replicas: int = Field(
        2, ge=0, description="largest streams.num.standby.replicas a group may set"
    )
    group_streams_initial_rebalance_delay_ms: int = Field(
        3000,
        ge=0,
        description="wait for more members before a new streams group's first assignment",
    )
    group_streams_assignment_interval_ms: int = Field(
        1000,
        ge=0,
        le=15000,
        description="least time between two target assignments of a streams group",
    )
    group_streams_min_assignment_interval_ms: int = Field(
        0, ge=0, description="smallest streams.assignment.interval.ms a group may set"
    )
    group_streams_max_assignment_interval_ms: int = Field(
        15000, ge=0, description="largest streams.assignment.interval.ms a group may set"
    )
    group_streams_task_offset_interval_ms: int = Field(
        60000, ge=1, description="how often streams members report their task offsets"
    )
    group_streams_min_task_offset_interval_ms: int = Field(
        15000, ge=1, description="smallest streams.task.offset.interval.ms a group may set"
    )
    group_streams_acceptable_recovery_lag: int = Field(
        10000, ge=0, description="lag under which streams members count a task's state caught up"
    )
    group_streams_rack_aware_assignment_tags: str = Field(
        "",
        description="client tag keys a streams member must send (comma-separated); a v1 "
        "member missing one is told MISSING_CLIENT_TAGS",
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
    offsets_history_retention_ms: int = Field(
        604800000,
        ge=0,
        description="how long a group's history (offset changes, membership) is kept "
        "(0 = no history)",
    )
    offsets_history_merge_lag_ms: int = Field(
        60000,
        ge=0,
        description="in a cluster, the history rows of a round older than this are merged, "
        "a partition's run of them into one row compressed together (0 = never merged)",
    )
    offsets_status_window_commits: int = Field(
        5,
        ge=2,
        description="a partition is STALL when this many commits in a row keep its offset "
        "with lag, WARN when its lag did not decrease over this many offset changes",
    )
    offsets_status_stop_ms: int = Field(
        300000, ge=1, description="a partition with lag is STOP after this long without a commit"
    )

    # -- transactions: the transaction coordinator and __transaction_state
    transaction_version: int = Field(
        2,
        ge=0,
        le=2,
        description="the finalized transaction.version, 2 as Kafka 4.x finalizes it for a new "
        "cluster: TV2 (KIP-890 part 2), an epoch bump per transaction, for the clients that "
        "speak it (Java 4.x); 1 leaves every client on the TV1 protocol",
    )
    transaction_max_timeout_ms: int = Field(
        900000, ge=1, description="longest transaction.timeout.ms a producer may ask for"
    )
    transaction_state_log_num_partitions: int = Field(
        50, ge=1, description="partitions of __transaction_state"
    )
    transaction_state_log_segment_bytes: int = Field(
        104857600, ge=1024, description="segment size of __transaction_state"
    )
    transactional_id_expiration_ms: int = Field(
        604800000, ge=1, description="idle time after which a transactional id expires"
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10000, ge=1, description="how often timed-out transactions are looked for and aborted"
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = Field(
        3600000, ge=1, description="how often expired transactional ids are removed"
    )

    # -- share partitions (KIP-932): the share-partition leader and the share coordinator
    group_share_record_lock_duration_ms: int = Field(
        30000, ge=1000, le=3600000, description="how long a share consumer holds acquired records"
    )
    group_share_min_record_lock_duration_ms: int = Field(
        15000, ge=1000, le=3600000, description="lowest share.record.lock.duration.ms of a group"
    )
    group_share_max_record_lock_duration_ms: int = Field(
        60000, ge=1000, le=3600000, description="highest share.record.lock.duration.ms of a group"
    )
    group_share_delivery_count_limit: int = Field(
        5, ge=2, le=10, description="deliveries of a record before it is archived"
    )
    group_share_partition_max_record_locks: int = Field(
        2000, ge=100, le=10000, description="in-flight records of a share partition"
    )
    group_share_min_partition_max_record_locks: int = Field(
        100, ge=100, le=2000, description="lowest share.partition.max.record.locks of a group"
    )
    group_share_max_partition_max_record_locks: int = Field(
        4000, ge=2000, le=10000, description="highest share.partition.max.record.locks of a group"
    )
    group_share_max_share_sessions: int = Field(
        2000, ge=1, description="share sessions this broker keeps"
    )
    errors_deadletterqueue_auto_create_topics_enable: bool = Field(
        False, description="create a share group's missing dead-letter topic (KIP-1191)"
    )
    errors_deadletterqueue_topic_name_prefix: str = Field(
        "dlq.", description="prefix dead-letter topic names must have (empty: none)"
    )
    share_coordinator_state_topic_num_partitions: int = Field(
        50, ge=1, description="partitions of __share_group_state"
    )
    share_coordinator_snapshot_update_records_per_snapshot: int = Field(
        500, ge=0, le=500, description="share state updates between two snapshots of a key"
    )
    share_coordinator_state_topic_prune_interval_ms: int = Field(
        300000,
        ge=1,
        description="how often __share_group_state is pruned below every key's snapshot",
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
    log_retention_check_interval_ms: int = Field(
        30000,
        ge=1,
        description="pause between retention passes (segments past retention.ms or "
        "retention.bytes deleted); Kafka's default is 300000",
    )
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

    # -- cluster mode (several nodes on one PostgreSQL database; see docs/cluster.md)
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
        from coordinator.config.streams_checks import check_streams_settings

        check_streams_settings(self)
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
        advertised listeners are listeners (the principal mapping rules are checked by
        coordinator.security.settings_check, which knows their syntax)."""
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
    def streams_rack_aware_assignment_tags(self) -> tuple[str, ...]:
        """``group.streams.rack.aware.assignment.tags`` as Kafka's LIST type reads it."""
        trimmed = self.group_streams_rack_aware_assignment_tags.strip()
        return tuple(re.split(r"\s*,\s*", trimmed)) if trimmed else ()

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


# authorizer.class.name values kgc accepts: Kafka's KRaft authorizer and the ZooKeeper-era
# one (a stock server.properties names either); both mean Kafka's ACL semantics.
AUTHORIZER_CLASSES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
