"""The Python emitter: straight-line codecs for one struct at one version.

How this works: a ``Module`` accumulates one generated file. For every message and nested
struct it holds a slotted dataclass with the union of the fields of all versions (fields a
version lacks keep their schema default), and one decode and one encode function per
(struct, version), written out as straight-line code: consecutive fixed-width fields become
a single precompiled ``struct.Struct`` call, strings and arrays are inlined, flexible
versions use compact encodings and a tagged-field section where unknown tags are skipped.
Identical bodies across versions are emitted once and aliased.
"""

from __future__ import annotations

from typing import Any

from protocol.codegen.schema import FIXED, PY_TYPES, Field, Versions, build_fields

# Nullable strings that Kafka's request/response classes send as null when empty, at the
# versions where they are nullable (JoinGroupResponse's constructor turns a protocol name ""
# into null from v7: an error answer, or a group without a selected protocol).
EMPTY_AS_NULL = {("JoinGroupResponse", "ProtocolName")}
ZERO_UUID = "b'\\x00' * 16"


class Module:
    """Accumulates the text of one generated module."""

    def __init__(self, records: bool = False) -> None:
        # Wire messages decode strings as Java's new String(bytes, UTF_8) does (malformed
        # input replaced); stored records refuse malformed input as corrupt instead. Records
        # also give one class to the fields of a struct that name the same common struct.
        self.records = records
        self.structs: dict[str, str] = {}  # format -> Struct variable name
        self.classes: list[str] = []
        self.functions: list[str] = []
        self.bodies: dict[str, str] = {}  # body text -> function name (dedupe across versions)
        self.aliases: list[str] = []
        self.canon: dict[str, str] = {}

    def struct(self, fmt: str) -> str:
        if fmt not in self.structs:
            self.structs[fmt] = "_S_" + fmt[1:].replace("?", "o")
        return self.structs[fmt]

    def add_function(self, name: str, body: str) -> None:
        if body in self.bodies:
            self.canon[name] = self.bodies[body]
            self.aliases.append(f"{name} = {self.bodies[body]}")
        else:
            self.bodies[body] = name
            self.canon[name] = name
            self.functions.append(body.replace("@NAME@", name))

    def ref(self, name: str) -> str:
        """The function that ``name`` aliases, so identical parents dedupe too."""
        return self.canon[name]


def py_type(f: Field) -> str:
    if f.struct:
        t = f"list[{f.struct}]" if f.is_array else f.struct
    elif f.is_array:
        t = f"list[{PY_TYPES[f.elem]}]"
    else:
        t = PY_TYPES[f.type]
    nullable = f.nullable.lo <= f.nullable.hi or f.null_default
    return f"{t} | None" if nullable else t


def default_expr(f: Field) -> str:
    """Python expression for a field's default (a fresh object for mutable types)."""
    if f.null_default:
        return "None"
    if f.is_array:
        return "[]"
    if f.struct:
        return f"{f.struct}()"
    if f.type in ("bytes", "records"):
        return "b''"
    if f.type == "uuid":
        return ZERO_UUID
    return repr(f.default)


def emit_class(mod: Module, name: str, fields: list[Field]) -> None:
    lines = ["@dataclass(slots=True)", f"class {name}:"]
    if not fields:
        lines.append("    pass")
    for f in fields:
        d = default_expr(f)
        if d in ("[]",) or (d.endswith("()") and f.struct):
            lines.append(
                f"    {f.py}: {py_type(f)} = field(default_factory={'list' if d == '[]' else f.struct})"
            )
        else:
            lines.append(f"    {f.py}: {py_type(f)} = {d}")
    mod.classes.append("\n".join(lines))


def present(fields: list[Field], v: int) -> list[Field]:
    return [f for f in fields if v in f.versions]


def is_flex(f: Field, v: int, flexible: bool) -> bool:
    return flexible if f.flexible is None else v in f.flexible


class Decoder:
    """Emits a decode function body for one struct at one version."""

    def __init__(self, mod: Module, v: int, flexible: bool) -> None:
        self.mod = mod
        self.v = v
        self.flexible = flexible
        self.lines: list[str] = []
        self.tmp = 0

    def var(self) -> str:
        self.tmp += 1
        return f"t{self.tmp}"

    def w(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def read_value(
        self, f: Field, typ: str, target: str, ind: int, nullable: bool, flex: bool, n: str = "n"
    ) -> None:
        """Emit code reading one non-fixed value of ``typ`` into ``target``.

        ``n`` names the length local: inside an array's ``for _ in range(n)`` it must be
        another name, as mypyc (setup.py) re-reads a local loop bound on every iteration.
        """
        if typ == "string" or typ in ("bytes", "records"):
            is_str = typ == "string"
            if flex:
                self.w(ind, f"{n} = b[p]")
                self.w(ind, f"if {n} < 128: p += 1")
                self.w(ind, f"else: {n}, p = read_uvarint(b, p)")
                self.w(ind, f"{n} -= 1")
            else:
                fmt = "h" if is_str else "i"
                self.w(
                    ind,
                    f"{n} = {self.mod.struct('>' + fmt)}.unpack_from(b, p)[0]; p += {2 if is_str else 4}",
                )
            self.w(ind, f"if {n} < 0:")
            if nullable:
                self.w(ind + 1, f"{target} = None")
            else:
                self.w(ind + 1, f"raise DecodeError('null for non-nullable {f.name}')")
            self.w(ind, "else:")
            self.w(ind + 1, f"e = p + {n}")
            self.w(ind + 1, "if e > len(b): raise DecodeError('truncated')")
            # Java's new String(bytes, UTF_8), which Kafka uses, replaces malformed input.
            dec = ""
            if is_str:
                dec = ".decode()" if self.mod.records else ".decode('utf-8', 'replace')"
            self.w(ind + 1, f"{target} = b[p:e]{dec}; p = e")
        elif typ == "uuid":
            self.w(ind, f"{target} = b[p:p + 16]; p += 16")
        elif typ in FIXED:
            fmt, size = FIXED[typ]
            self.w(
                ind, f"{target} = {self.mod.struct('>' + fmt)}.unpack_from(b, p)[0]; p += {size}"
            )
        else:
            raise AssertionError(typ)

    def read_field(self, f: Field, target: str, ind: int) -> None:
        v = self.v
        nullable = v in f.nullable
        flex = is_flex(f, v, self.flexible)
        if f.is_array:
            if flex:
                self.w(ind, "n = b[p]")
                self.w(ind, "if n < 128: p += 1")
                self.w(ind, "else: n, p = read_uvarint(b, p)")
                self.w(ind, "n -= 1")
            else:
                self.w(ind, f"n = {self.mod.struct('>i')}.unpack_from(b, p)[0]; p += 4")
            self.w(ind, "if n < 0:")
            self.w(
                ind + 1,
                f"{target} = None"
                if nullable
                else f"raise DecodeError('null for non-nullable {f.name}')",
            )
            self.w(ind, "else:")
            self.w(ind + 1, "if n > len(b) - p: raise DecodeError('array too long')")
            if f.struct:
                # Fresh names per array: every local keeps one type (mypyc compiles them
                # as typed locals, so a name reused for another struct would fail a cast).
                fn = self.mod.ref(f"_dec_{f.struct}_{v}")
                acc, x = self.var(), self.var()
                self.w(ind + 1, f"{acc}: list[{f.struct}] = []")
                self.w(ind + 1, "for _ in range(n):")
                self.w(ind + 2, f"{x}, p = {fn}(b, p)")
                self.w(ind + 2, f"{acc}.append({x})")
                self.w(ind + 1, f"{target} = {acc}")
            elif f.elem in FIXED:
                fmt, size = FIXED[f.elem]
                self.w(
                    ind + 1, f"{target} = list(unpack_from('>%d{fmt}' % n, b, p)); p += n * {size}"
                )
            else:
                acc = self.var()
                self.w(ind + 1, f"{acc}: list[{PY_TYPES[f.elem]}] = []")
                self.w(ind + 1, "for _ in range(n):")
                t = self.var()
                self.read_value(f, f.elem, t, ind + 2, False, flex, n="m")
                self.w(ind + 2, f"{acc}.append({t})")
                self.w(ind + 1, f"{target} = {acc}")
        elif f.struct:
            fn = self.mod.ref(f"_dec_{f.struct}_{v}")
            if nullable:
                # The presence byte: -1 is null, 1 present. A stored record's 0 is read as
                # null too, as kgc's record readers always have.
                cmp = "<= 0" if self.mod.records else "< 0"
                self.w(ind, f"if {self.mod.struct('>b')}.unpack_from(b, p)[0] {cmp}:")
                self.w(ind + 1, f"p += 1; {target} = None")
                self.w(ind, "else:")
                self.w(ind + 1, f"{target}, p = {fn}(b, p + 1)")
            else:
                self.w(ind, f"{target}, p = {fn}(b, p)")
        else:
            self.read_value(f, f.type, target, ind, nullable, flex)

    def body(self, cls: str, fields: list[Field]) -> str:
        v = self.v
        names: dict[str, str] = {}
        regular = [f for f in present(fields, v) if not (self.flexible and v in f.tagged)]
        tagged = [f for f in present(fields, v) if self.flexible and v in f.tagged]
        # Group consecutive fixed-width fields into one unpack.
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in FIXED and not f.is_array:
                run = [f]
                while i + len(run) < len(regular) and regular[i + len(run)].type in FIXED:
                    run.append(regular[i + len(run)])
                fmt = ">" + "".join(FIXED[x.type][0] for x in run)
                size = sum(FIXED[x.type][1] for x in run)
                targets = []
                for x in run:
                    names[x.py] = self.var()
                    targets.append(names[x.py])
                self.w(
                    1,
                    f"{', '.join(targets)}{',' if len(run) == 1 else ''} = {self.mod.struct(fmt)}.unpack_from(b, p); p += {size}",
                )
                i += len(run)
                continue
            names[f.py] = self.var()
            self.read_field(f, names[f.py], 1)
            i += 1
        if self.flexible:
            if tagged:
                for f in tagged:
                    names[f.py] = self.var()
                    self.w(1, f"{names[f.py]} = {default_expr(f)}")
                # The count of tagged fields is not ``n``, which the fields' reads reassign
                # inside the loop (see read_value).
                self.w(1, "nt = b[p]")
                self.w(1, "if nt < 128: p += 1")
                self.w(1, "else: nt, p = read_uvarint(b, p)")
                self.w(1, "for _ in range(nt):")
                self.w(2, "tag, p = read_uvarint(b, p)")
                self.w(2, "size, p = read_uvarint(b, p)")
                self.w(2, "end = p + size")
                first = True
                for f in sorted(tagged, key=lambda x: x.tag or 0):
                    self.w(2, f"{'if' if first else 'elif'} tag == {f.tag}:")
                    first = False
                    self.read_field(f, names[f.py], 3)
                    self.w(3, "if p != end: raise DecodeError('bad tagged field size')")
                self.w(2, "else:")
                self.w(3, "p = end")
            else:
                self.w(1, "n = b[p]")
                self.w(1, "if n == 0: p += 1")
                self.w(1, "else: p = skip_tagged_fields(b, p)")
        args = ", ".join(names.get(f.py, default_expr(f)) for f in fields)
        self.w(1, f"return {cls}({args}), p")
        return f"def @NAME@(b: bytes, p: int) -> tuple[{cls}, int]:\n" + "\n".join(self.lines)


class Encoder:
    """Emits an encode function body for one struct at one version."""

    def __init__(self, mod: Module, v: int, flexible: bool) -> None:
        self.mod = mod
        self.v = v
        self.flexible = flexible
        self.lines: list[str] = []
        self.tmp = 0
        self.cls = ""  # the struct being emitted

    def w(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def var(self) -> str:
        self.tmp += 1
        return f"t{self.tmp}"

    def write_len(self, expr: str, flex: bool, wide: bool, ind: int) -> None:
        if flex:
            self.w(ind, f"n = {expr} + 1")
            self.w(ind, "out += UVARINT_SMALL[n] if n < 128 else uvarint(n)")
        else:
            fmt = ">i" if wide else ">h"
            self.w(ind, f"out += {self.mod.struct(fmt)}.pack({expr})")

    def write_null(self, flex: bool, wide: bool, ind: int) -> None:
        if flex:
            self.w(ind, "out += b'\\x00'")
        else:
            minus_one = repr(b"\xff" * (4 if wide else 2))
            self.w(ind, f"out += {minus_one}")

    def write_value(
        self, f: Field, typ: str, expr: str, ind: int, nullable: bool, flex: bool
    ) -> None:
        if typ in ("string", "bytes", "records"):
            is_str = typ == "string"
            t = self.var()
            if nullable:
                empty_as_null = (self.cls, f.name) in EMPTY_AS_NULL
                self.w(ind, f"if {'not ' + expr if empty_as_null else expr + ' is None'}:")
                self.write_null(flex, not is_str, ind + 1)
                self.w(ind, "else:")
                ind += 1
            if (
                not nullable
                and (f.null_default or f.nullable.lo <= f.nullable.hi)
                and not f.is_array
            ):
                # Nullable in other versions only: a None here is sent as empty.
                expr = f"({expr} or {repr('') if is_str else repr(b'')})"
            self.w(ind, f"{t} = {expr}{'.encode()' if is_str else ''}")
            self.write_len(f"len({t})", flex, not is_str, ind)
            self.w(ind, f"out += {t}")
        elif typ == "uuid":
            self.w(ind, f"out += {expr}")
        elif typ in FIXED:
            self.w(ind, f"out += {self.mod.struct('>' + FIXED[typ][0])}.pack({expr})")
        else:
            raise AssertionError(typ)

    def write_field(self, f: Field, expr: str, ind: int) -> None:
        v = self.v
        nullable = v in f.nullable
        flex = is_flex(f, v, self.flexible)
        if f.is_array:
            if nullable:
                self.w(ind, f"if {expr} is None:")
                self.write_null(flex, True, ind + 1)
                self.w(ind, "else:")
                ind += 1
            elif f.null_default or f.nullable.lo <= f.nullable.hi:
                expr = f"({expr} or [])"
            self.write_len(f"len({expr})", flex, True, ind)
            if f.struct:
                # A fresh loop variable per array, so each local has one type (see Decoder).
                x = self.var()
                self.w(ind, f"for {x} in {expr}:")
                self.w(ind + 1, f"{self.mod.ref(f'_enc_{f.struct}_{v}')}({x}, out)")
            elif f.elem in FIXED:
                fmt = FIXED[f.elem][0]
                self.w(ind, f"out += pack('>%d{fmt}' % len({expr}), *{expr})")
            else:
                x = self.var()
                self.w(ind, f"for {x} in {expr}:")
                self.write_value(f, f.elem, x, ind + 1, False, flex)
        elif f.struct:
            if nullable:
                self.w(ind, f"if {expr} is None:")
                self.w(ind + 1, "out += b'\\xff'")
                self.w(ind, "else:")
                self.w(ind + 1, "out += b'\\x01'")
                self.w(ind + 1, f"{self.mod.ref(f'_enc_{f.struct}_{v}')}({expr}, out)")
            else:
                self.w(ind, f"{self.mod.ref(f'_enc_{f.struct}_{v}')}({expr}, out)")
        else:
            self.write_value(f, f.type, expr, ind, nullable, flex)

    def body(self, cls: str, fields: list[Field]) -> str:
        v = self.v
        self.cls = cls
        regular = [f for f in present(fields, v) if not (self.flexible and v in f.tagged)]
        tagged = [f for f in present(fields, v) if self.flexible and v in f.tagged]
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in FIXED and not f.is_array:
                run = [f]
                while i + len(run) < len(regular) and regular[i + len(run)].type in FIXED:
                    run.append(regular[i + len(run)])
                fmt = ">" + "".join(FIXED[x.type][0] for x in run)
                self.w(
                    1, f"out += {self.mod.struct(fmt)}.pack({', '.join('o.' + x.py for x in run)})"
                )
                i += len(run)
                continue
            self.write_field(f, f"o.{f.py}", 1)
            i += 1
        if self.flexible:
            if not tagged:
                self.w(1, "out += b'\\x00'")
            else:
                # Tagged fields are written only when they differ from their default.
                self.w(1, "tags: list[tuple[int, bytearray]] = []")
                for f in sorted(tagged, key=lambda x: x.tag or 0):
                    self.w(1, f"if o.{f.py} != {default_expr(f)}:")
                    self.w(2, "saved, out = out, bytearray()")
                    self.write_field(f, f"o.{f.py}", 2)
                    self.w(2, f"tags.append(({f.tag}, out)); out = saved")
                self.w(1, "out += uvarint(len(tags))")
                self.w(1, "for tag, data in tags:")
                self.w(2, "out += uvarint(tag); out += uvarint(len(data)); out += data")
        if not self.lines:
            self.w(1, "pass")
        return f"def @NAME@(o: {cls}, out: bytearray) -> None:\n" + "\n".join(self.lines)


def collect_structs(cls: str, fields: list[Field]) -> list[tuple[str, list[Field]]]:
    """Depth-first list of (class name, fields), children before parents."""
    out: list[tuple[str, list[Field]]] = []
    for f in fields:
        if f.struct:
            out.extend(collect_structs(f.struct, f.fields))
    out.append((cls, fields))
    return out


def versions_of(schema: dict[str, Any]) -> range:
    if schema["name"] == "RequestHeader":
        return range(0, 3)  # v0 (no client id) is still decodable even if Kafka 4 dropped it
    vr = Versions.parse(schema["validVersions"])
    return range(vr.lo, vr.hi + 1)


def emit_message(
    mod: Module, schema: dict[str, Any], struct_names: dict[str, str]
) -> dict[str, Any]:
    name = schema["name"]
    fields = build_fields(schema["fields"], struct_names, name, share=mod.records)
    flex = Versions.parse(schema.get("flexibleVersions"))
    structs = collect_structs(name, fields)
    # A common struct used by several fields of one message is emitted once.
    first = {cls: i for i, (cls, _) in reversed(list(enumerate(structs)))}
    structs = [s for i, s in enumerate(structs) if first[s[0]] == i]
    for cls, fl in structs:
        emit_class(mod, cls, fl)
    for v in versions_of(schema):
        for cls, fl in structs:
            mod.add_function(f"_dec_{cls}_{v}", Decoder(mod, v, v in flex).body(cls, fl))
            mod.add_function(f"_enc_{cls}_{v}", Encoder(mod, v, v in flex).body(cls, fl))
    return {"name": name, "versions": versions_of(schema), "flexible": flex}


def render(mod: Module, banner: str, extra: list[str]) -> str:
    head = [
        banner.rstrip("\n"),
        "# ruff: noqa",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass, field",
        "from struct import Struct, pack, unpack_from",
        "from typing import Callable",
        "",
        "from protocol.primitives import UVARINT_SMALL, DecodeError, read_uvarint, skip_tagged_fields, uvarint",
        "",
    ]
    head += [
        f"{var} = Struct({fmt!r})" for fmt, var in sorted(mod.structs.items(), key=lambda kv: kv[1])
    ]
    parts = ["\n".join(head), *mod.classes, *mod.functions, "\n".join(mod.aliases), *extra]
    return "\n\n\n".join(p for p in parts if p) + "\n"
