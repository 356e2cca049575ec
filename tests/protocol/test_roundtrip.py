"""Hypothesis round-trips every (message, version): encode then decode gives the same object.

Strategies are derived from the same schema model the generator uses, so each version
draws exactly the fields it carries (others stay at their defaults).
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codegen

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def value_strategy(f: codegen.Field, typ: str, v: int) -> st.SearchStrategy[Any]:
    if typ in INT_RANGES:
        lo, hi = INT_RANGES[typ]
        return st.integers(lo, hi)
    if typ == "bool":
        return st.booleans()
    if typ == "float64":
        return st.floats(allow_nan=False)
    if typ == "string":
        return st.text(max_size=20)
    if typ in ("bytes", "records"):
        return st.binary(max_size=40)
    if typ == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(typ)


def field_strategy(mod: Any, f: codegen.Field, v: int, owner: str) -> st.SearchStrategy[Any]:
    if f.struct:
        inner: st.SearchStrategy[Any] = struct_strategy(mod, f.struct, f.fields, v)
    elif (owner, f.name) in codegen.EMPTY_AS_NULL and v in f.nullable:
        # Sent as null when empty, as Kafka does: "" comes back as None, by design.
        inner = st.text(min_size=1, max_size=20)
    else:
        inner = value_strategy(f, f.elem, v)
    if f.is_array:
        inner = st.lists(inner, max_size=3)
    if v in f.nullable:
        inner = st.none() | inner
    return inner


def struct_strategy(
    mod: Any, cls_name: str, fields: list[codegen.Field], v: int
) -> st.SearchStrategy[Any]:
    cls = getattr(mod, cls_name)
    kwargs = {f.py: field_strategy(mod, f, v, cls_name) for f in fields if v in f.versions}
    return st.builds(cls, **kwargs)


CASES = []
for api in codegen.APIS:
    modname = codegen.snake(api)
    for kind in ("Request", "Response"):
        schema = codegen.load_schema(api + kind)
        for v in codegen.versions_of(schema):
            CASES.append(pytest.param(modname, api + kind, v, id=f"{api}{kind}-v{v}"))


@pytest.mark.parametrize(("modname", "schema_name", "version"), CASES)
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_round_trip(modname: str, schema_name: str, version: int, data: st.DataObject) -> None:
    mod = importlib.import_module(f"protocol.messages.{modname}")
    schema = codegen.load_schema(schema_name)
    names: dict[str, str] = {}
    if schema_name.endswith("Response"):
        # Struct class names are assigned across request then response, as the generator does.
        codegen.build_fields(
            codegen.load_schema(schema_name[: -len("Response")] + "Request")["fields"],
            names,
            schema_name[: -len("Response")] + "Request",
        )
    fields = codegen.build_fields(schema["fields"], names, schema["name"])
    obj = data.draw(struct_strategy(mod, schema["name"], fields, version))
    kind = "REQUEST" if schema_name.endswith("Request") else "RESPONSE"
    out = bytearray()
    getattr(mod, f"{kind}_ENCODERS")[version](obj, out)
    decoded, end = getattr(mod, f"{kind}_DECODERS")[version](bytes(out), 0)
    assert end == len(out)
    assert decoded == obj


def _record_cases() -> list[Any]:
    """(family module, schema, its fields, version) of every coordinator record schema.

    Struct class names are assigned across a family's schemas in the generator's order,
    with the fields of one owner sharing a common struct's class, as the generator does.
    """
    cases = []
    names: dict[str, dict[str, str]] = {}
    for schema in codegen.record_schemas():
        family = codegen.family_of(schema["name"])
        fields = codegen.build_fields(
            schema["fields"], names.setdefault(family, {}), schema["name"], share=True
        )
        for v in codegen.versions_of(schema):
            cases.append(
                pytest.param(family, schema["name"], fields, v, id=f"{schema['name']}-v{v}")
            )
    return cases


@pytest.mark.parametrize(("family", "name", "fields", "version"), _record_cases())
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_record_round_trip(
    family: str, name: str, fields: list[codegen.Field], version: int, data: st.DataObject
) -> None:
    mod = importlib.import_module(f"storage.records.messages.{family}")
    obj = data.draw(struct_strategy(mod, name, fields, version))
    table = codegen.snake(name).upper()
    out = bytearray()
    getattr(mod, f"{table}_ENCODERS")[version](obj, out)
    decoded, end = getattr(mod, f"{table}_DECODERS")[version](bytes(out), 0)
    assert end == len(out)
    assert decoded == obj
