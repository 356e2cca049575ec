"""Generate kgc's codecs from Kafka's JSON schemas: wire messages and coordinator records.

How this works: ``schema`` reads a schema into a tree of ``Field``; ``emit`` writes one
straight-line decode and encode function per (struct, version) into a ``Module``; ``apis``
generates ``protocol/messages`` (one module per API) and ``protocol/errors.py``;
``records`` generates ``storage/records/messages`` (one module per family of coordinator
records); ``cli`` is ``python -m protocol.codegen``. The names tests and tools use are
re-exported here.
"""

from __future__ import annotations

from protocol.codegen.apis import APIS, OUT_DIR, generate
from protocol.codegen.cli import main
from protocol.codegen.emit import EMPTY_AS_NULL, Module, emit_message, versions_of
from protocol.codegen.records import family_of, generate_records, record_schemas
from protocol.codegen.schema import (
    KAFKA_39_REF,
    OLD_SCHEMAS,
    OLD_VERSION_APIS,
    Field,
    Versions,
    _read_schema,
    build_fields,
    load_schema,
    snake,
    with_old_versions,
)

__all__ = [
    "APIS",
    "EMPTY_AS_NULL",
    "KAFKA_39_REF",
    "OLD_SCHEMAS",
    "OLD_VERSION_APIS",
    "OUT_DIR",
    "Field",
    "Module",
    "Versions",
    "_read_schema",
    "build_fields",
    "emit_message",
    "family_of",
    "generate",
    "generate_records",
    "load_schema",
    "main",
    "record_schemas",
    "snake",
    "versions_of",
    "with_old_versions",
]
