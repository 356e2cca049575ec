"""The schema model: Kafka's JSON message schemas read into ``Field`` trees.

How this works: a schema is JSON with ``//`` comments; ``commonStructs`` are inlined into
the fields that name them, and ``build_fields`` turns each field into a ``Field`` holding its
version ranges (present, nullable, tagged, flexible), its default and, for a struct or an
array of structs, the class name its emitter will use. Kafka 4 cut the oldest versions of
some APIs (KIP-896) while keeping their fields in the schemas; kgc serves them again, so
``protocol/schemas/kafka-3.9`` holds Kafka 3.9's field lists of those messages
(``--import-kafka-3.9`` writes them from a Kafka checkout): a message's range then starts
at 3.9's first version, and loading fails unless every re-added version lays out exactly
the fields it had in 3.9.
"""

from __future__ import annotations

import importlib.resources
import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXTRA_SCHEMAS = Path(__file__).parent.parent / "schemas"
OLD_SCHEMAS = EXTRA_SCHEMAS / "kafka-3.9"
# The Kafka 3.9 commit (branch 3.9) the old field lists were taken from.
KAFKA_39_REF = "c821449fb7c1e2c0f398eeb5cfc4a8abc210c0a4"
# Messages whose versions Kafka 4 dropped and kgc serves (the group, offset and data-plane
# APIs, and the topic admin APIs old clients call).
OLD_VERSION_APIS = [
    "Produce",
    "Fetch",
    "ListOffsets",
    "OffsetCommit",
    "OffsetFetch",
    "CreateTopics",
    "DeleteTopics",
]
SCHEMA_PACKAGE = "kafka.protocol.schemas.resources"

FIXED: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}
PY_TYPES = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "uint32": "int",
    "int64": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes",
    "records": "bytes",
    "uuid": "bytes",
}
ZERO_UUID = "b'\\x00' * 16"


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int  # inclusive; large for "N+"

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)  # empty
        if text.endswith("+"):
            return cls(int(text[:-1]), 1 << 15)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, v: object) -> bool:
        return isinstance(v, int) and self.lo <= v <= self.hi


@dataclass
class Field:
    name: str
    py: str
    type: str
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    flexible: Versions | None  # field-level override (e.g. the header's ClientId)
    default: Any
    null_default: bool = False  # the schema's default is null
    fields: list[Field] = field(default_factory=list)
    struct: str | None = None  # struct class name when the type is a struct or []struct

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


def _read_schema(path_text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(re.sub(r"(?m)^\s*//.*$", "", path_text))
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}

    def resolve(fields: list[dict[str, Any]]) -> None:
        for f in fields:
            inner = f["type"][2:] if f["type"].startswith("[]") else f["type"]
            if inner in common and "fields" not in f:
                f["fields"] = common[inner]
            resolve(f.get("fields", []))

    resolve(data["fields"])
    return data


def load_schema(name: str) -> dict[str, Any]:
    extra = EXTRA_SCHEMAS / f"{name}.json"
    if extra.exists():
        text = extra.read_text()
    else:
        text = importlib.resources.files(SCHEMA_PACKAGE).joinpath(f"{name}.json").read_text()
    data = _read_schema(text)
    old = OLD_SCHEMAS / f"{name}.json"
    if old.exists():
        data = with_old_versions(data, _read_schema(old.read_text()))
    return data


def layout(fields: list[dict[str, Any]], v: int, flexible: bool) -> list[Any]:
    """What a version puts on the wire, field by field (names, types, nullability, tags)."""
    out: list[Any] = []
    for f in fields:
        if v not in field_versions(f):
            continue
        tagged = flexible and v in Versions.parse(f.get("taggedVersions"))
        out.append(
            (
                f["name"],
                f["type"].strip(),
                v in Versions.parse(f.get("nullableVersions")),
                f.get("tag") if tagged else None,
                f.get("default") if tagged else None,
                layout(f.get("fields", []), v, flexible),
            )
        )
    return out


def with_old_versions(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """Kafka 4's schema with its range extended down to Kafka 3.9's first version.

    Kafka 4 kept the fields of the versions it dropped, so the merged schema is Kafka 4's
    with a wider ``validVersions``; each re-added version is checked to lay out exactly the
    fields Kafka 3.9's schema gives it, so a field Kafka 4 removed or renamed fails loudly.
    """
    lo_new = Versions.parse(new["validVersions"])
    lo_old = Versions.parse(old["validVersions"])
    if lo_old.lo >= lo_new.lo:
        return new
    flex_new = Versions.parse(new.get("flexibleVersions"))
    flex_old = Versions.parse(old.get("flexibleVersions"))
    for v in range(lo_old.lo, lo_new.lo):
        a = layout(old["fields"], v, v in flex_old)
        b = layout(new["fields"], v, v in flex_new)
        if a != b or (v in flex_old) != (v in flex_new):
            raise SystemExit(
                f"{new['name']} v{v}: Kafka 3.9's fields differ from the merged schema's;"
                f" the old version needs its own field list\n  3.9: {a}\n  now: {b}"
            )
    merged = dict(new)
    merged["validVersions"] = f"{lo_old.lo}-{lo_new.hi}"
    return merged


# Keys of Kafka's JSON schemas the generator reads; the rest (docs, entity types) is dropped.
_SCHEMA_KEYS = ("apiKey", "type", "name", "validVersions", "flexibleVersions")
_FIELD_KEYS = (
    "name",
    "type",
    "versions",
    "nullableVersions",
    "taggedVersions",
    "tag",
    "flexibleVersions",
    "default",
)


def _field_lines(fields: list[dict[str, Any]], indent: int) -> list[str]:
    lines = []
    for i, f in enumerate(fields):
        head = ", ".join(f"{json.dumps(k)}: {json.dumps(f[k])}" for k in _FIELD_KEYS if k in f)
        comma = "," if i < len(fields) - 1 else ""
        pad = "  " * indent
        if "fields" in f:
            lines.append(f'{pad}{{ {head}, "fields": [')
            lines += _field_lines(f["fields"], indent + 1)
            lines.append(f"{pad}]}}{comma}")
        else:
            lines.append(f"{pad}{{ {head} }}{comma}")
    return lines


def field_list(schema: dict[str, Any], source: str) -> str:
    """A schema reduced to what the generator reads, one field a line (commonStructs inlined)."""
    head = ", ".join(
        f"{json.dumps(k)}: {json.dumps(schema[k])}" for k in _SCHEMA_KEYS if k in schema
    )
    lines = [f"// Field list of {source}.", "{", f"  {head},", '  "fields": [']
    lines += _field_lines(schema["fields"], 2)
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def import_kafka_39(repo: Path) -> list[Path]:
    """Write Kafka 3.9's field lists of the messages in OLD_VERSION_APIS from a Kafka git repo."""
    import subprocess

    written = []
    OLD_SCHEMAS.mkdir(exist_ok=True)
    for api in OLD_VERSION_APIS:
        for kind in ("Request", "Response"):
            path = f"clients/src/main/resources/common/message/{api}{kind}.json"
            text = subprocess.run(
                ["git", "-C", str(repo), "show", f"{KAFKA_39_REF}:{path}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            out = OLD_SCHEMAS / f"{api}{kind}.json"
            src = f"apache/kafka {KAFKA_39_REF[:12]} (3.9) {path}"
            out.write_text(field_list(_read_schema(text), src))
            written.append(out)
    return written


def field_versions(f: dict[str, Any]) -> Versions:
    """A field's versions; as Kafka's ``FieldSpec``, a tagged field without "versions" has
    its tagged versions (the rest of Kafka's schemas always give "versions")."""
    return Versions.parse(f.get("versions", f.get("taggedVersions")))


def parse_default(f: dict[str, Any], typ: str, nullable: Versions) -> Any:
    d = f.get("default")
    if d == "null":
        return None
    if typ in FIXED:
        if d is None:
            return False if typ == "bool" else (0.0 if typ == "float64" else 0)
        if typ == "bool":
            return str(d).lower() == "true"
        if typ == "float64":
            return float(d)
        return int(str(d), 0)
    if typ == "string":
        return "" if d is None else str(d)
    return None  # bytes/records/uuid/arrays/structs: handled by the emitter


def build_fields(
    raw: list[dict[str, Any]], struct_names: dict[str, str], owner: str, share: bool = False
) -> list[Field]:
    out: list[Field] = []
    for f in raw:
        typ = f["type"].strip()
        nullable = Versions.parse(f.get("nullableVersions"))
        fld = Field(
            name=f["name"],
            py=snake(f["name"]),
            type=typ,
            versions=field_versions(f),
            nullable=nullable,
            tagged=Versions.parse(f.get("taggedVersions")),
            tag=f.get("tag"),
            flexible=Versions.parse(f["flexibleVersions"]) if "flexibleVersions" in f else None,
            default=parse_default(f, typ[2:] if typ.startswith("[]") else typ, nullable),
            # Record schemas write a JSON null where message schemas write "null".
            null_default="default" in f and f["default"] in (None, "null"),
        )
        if "fields" in f:
            base = fld.elem
            # A struct name already taken gets its owner's prefix; with ``share``, fields of
            # one owner that name the same struct share its class.
            taken = base in struct_names and not (share and struct_names[base] == owner)
            cls = f"{owner}{base}" if taken else base
            struct_names[cls] = owner
            fld.struct = cls
            fld.fields = build_fields(f["fields"], struct_names, cls, share)
        out.append(fld)
    return out
