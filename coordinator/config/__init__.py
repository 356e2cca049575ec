"""One settings model for kgc: command line, ``KGC_*`` environment, properties file.

How this works: every setting is a field of ``Settings`` (settings.py) named after Kafka's
property with dots turned into underscores. ``load`` (sources.py) builds it from, strongest
first, command-line flags, the environment, a Java properties file using Kafka's own names
(properties.py: a ``server.properties`` written for Kafka starts kgc), then the defaults.
Invalid values fail at start-up with one line naming the setting. At start ``log_startup``
(report.py) logs what loading found (ignored, unknown and deprecated names) and the
effective configuration, secrets hidden. log_configs.py derives the offsets log's
``LogConfig`` from the settings.
"""

from coordinator.config.log_configs import (
    CLUSTER_OFFSETS_SEGMENT_BYTES,
    CLUSTER_OFFSETS_SEGMENT_MS,
    log_config,
    offsets_log_config,
    share_state_log_config,
    txn_state_log_config,
)
from coordinator.config.properties import (
    DEPRECATED_NAMES,
    SYNONYMS,
    ConfigNotes,
    PropertiesSource,
    kafka_name,
    load_properties,
    read_properties,
)
from coordinator.config.report import effective_settings, log_startup, startup_report
from coordinator.config.settings import (
    AUTHORIZER_CLASSES,
    DEFAULT_PROTOCOL_MAP,
    SECURITY_PROTOCOLS,
    ListenerSpec,
    Settings,
    parse_listener,
    parse_listeners,
)
from coordinator.config.sources import (
    DEPRECATED_FLAGS,
    TOOL_ENVIRONMENT,
    add_arguments,
    load,
)

__all__ = [
    "AUTHORIZER_CLASSES",
    "CLUSTER_OFFSETS_SEGMENT_BYTES",
    "CLUSTER_OFFSETS_SEGMENT_MS",
    "DEFAULT_PROTOCOL_MAP",
    "DEPRECATED_FLAGS",
    "DEPRECATED_NAMES",
    "SECURITY_PROTOCOLS",
    "SYNONYMS",
    "TOOL_ENVIRONMENT",
    "ConfigNotes",
    "ListenerSpec",
    "PropertiesSource",
    "Settings",
    "add_arguments",
    "effective_settings",
    "kafka_name",
    "load",
    "load_properties",
    "log_config",
    "log_startup",
    "offsets_log_config",
    "parse_listener",
    "parse_listeners",
    "read_properties",
    "share_state_log_config",
    "startup_report",
    "txn_state_log_config",
]
