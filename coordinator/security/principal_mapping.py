"""The principal of a TLS client: its certificate's subject, mapped by Kafka's rules.

How this works: Kafka names an SSL client by its certificate's subject as Java's
``X500Principal.getName()`` writes it (RFC 2253: the RDNs last-first, CN/C/L/ST/O/OU/
STREET/DC/UID by keyword, any other attribute as ``OID=#hex`` of its DER value, and
``,=+<>#;"\\`` escaped), then passes that string through ``ssl.principal.mapping.rules``
(``SslPrincipalMapper``): a comma-separated list tried in order, ``DEFAULT`` (the name
unchanged) or ``RULE:pattern/replacement/[LU]`` (the pattern must match the whole name;
``replacement`` is Java's ``replaceAll`` replacement with ``$n`` references, optionally
lower- or upper-cased). The first rule that matches names the principal (``User:<name>``);
when none does, authentication fails, as in Kafka.

``rfc2253_name`` reads the subject's DER itself (not ``cryptography``'s RFC 4514 string,
which writes unknown attributes and escapes differently), so the name a rule sees is the
one Kafka's rule would see.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from coordinator.security import KafkaPrincipal

__all__ = [
    "NoMatchingRule",
    "SslPrincipalMapper",
    "principal_from_certificate",
    "rfc2253_name",
]

# Kafka's SslPrincipalMapper grammar: group 1 DEFAULT, group 2 the pattern, 4 the
# replacement, 6 the case flag; the last alternative swallows anything else (an error, or
# an empty rule, which is ignored).
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule applies to the name (authentication fails)."""


class _Rule:
    __slots__ = ("lower", "pattern", "replacement", "upper")

    def __init__(
        self,
        pattern: str | None = None,
        replacement: str = "",
        lower: bool = False,
        upper: bool = False,
    ) -> None:
        self.pattern = re.compile(pattern) if pattern is not None else None  # None: DEFAULT
        self.replacement = replacement
        self.lower = lower
        self.upper = upper

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:  # Java's Matcher.matches()
            return None
        groups = self.pattern.groups
        repl = _java_replacement(_escape_literal_back_references(self.replacement, groups))
        # Java's String.replaceAll: every match, not only the whole-name one.
        result = self.pattern.sub(repl, name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        flag = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{flag}"


def _escape_literal_back_references(value: str, groups: int) -> str:
    """Kafka's rule: ``$n`` beyond the pattern's groups is a literal ``$n`` (``$123`` with
    12 groups is ``$12`` followed by ``3``)."""
    if groups == 0:
        return value
    out = value
    shift = 0
    for m in _BACK_REFERENCE.finditer(value):
        digits = m.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            at = m.start(1) - 1 + shift
            out = out[:at] + "\\" + out[at:]
            shift += 1
    return out


def _java_replacement(replacement: str) -> Callable[[re.Match[str]], str]:
    """Java's ``Matcher.appendReplacement`` syntax: ``\\x`` is a literal x, ``$n`` a group
    (further digits are taken while they still name a group), ``${name}`` a named group."""
    parts: list[tuple[str, str | int]] = []  # ("lit", text) | ("num", n) | ("name", name)
    literal: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("character to be escaped is missing")
            literal.append(replacement[i + 1])
            i += 2
            continue
        if c != "$":
            literal.append(c)
            i += 1
            continue
        if literal:
            parts.append(("lit", "".join(literal)))
            literal = []
        i += 1
        if i < n and replacement[i] == "{":
            end = replacement.find("}", i)
            if end < 0:
                raise ValueError("named capturing group is missing trailing '}'")
            parts.append(("name", replacement[i + 1 : end]))
            i = end + 1
            continue
        if i >= n or not replacement[i].isdigit():
            raise ValueError("Illegal group reference")
        start = i
        while i < n and replacement[i].isdigit():
            i += 1
        parts.append(("num", int(replacement[start:i])))
    if literal:
        parts.append(("lit", "".join(literal)))

    def expand(m: re.Match[str]) -> str:
        out: list[str] = []
        for kind, value in parts:
            if kind == "lit":
                out.append(str(value))
            elif kind == "name":
                if value not in m.re.groupindex:
                    raise IndexError(f"No group with name {{{value}}}")
                out.append(m.group(str(value)) or "")
            else:
                # The first digit always counts; more only while they name a group.
                digits = str(value)
                index, used = int(digits[0]), 1
                while used < len(digits) and index * 10 + int(digits[used]) <= m.re.groups:
                    index = index * 10 + int(digits[used])
                    used += 1
                if index > m.re.groups:
                    raise IndexError(f"No group {index}")
                out.append((m.group(index) or "") + digits[used:])
        return "".join(out)

    return expand


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: Kafka's parsing, rule order and matching."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        self.rules = [
            _parse_rule(r) for r in _split_rules(rules if rules is not None else "DEFAULT")
        ]
        self.rules = [r for r in self.rules if r is not None]

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            assert rule is not None
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self}")

    def __str__(self) -> str:
        return "[" + ", ".join(str(r) for r in self.rules) + "]"


def _split_rules(rules: str) -> list[str]:
    text = rules.strip()
    out: list[str] = []
    pos = 0
    # Java's Matcher.find() loop: each match starts where the last ended; an empty match
    # at the end stops it.
    while pos <= len(text):
        m = _RULE_SPLITTER.search(text, pos)
        if m is None:
            break
        out.append(m.group(1))
        if m.end() == pos and m.end() == len(text):
            break
        pos = m.end() if m.end() > m.start() else m.end() + 1
    return out


def _parse_rule(rule: str) -> _Rule | None:
    m = _RULE_PARSER.match(rule)
    if m is None:
        raise ValueError(f"Invalid rule: {rule}")
    if m.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[m.end() :]}`")
    if m.group(1) is not None:
        return _Rule()
    if m.group(2) is not None:
        return _Rule(m.group(2), m.group(4), m.group(6) == "L", m.group(6) == "U")
    return None  # an empty rule


# -- RFC 2253 names from DER, as Java's X500Principal.getName() writes them

_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# PrintableString, T61String, IA5String, GeneralString, BMPString, UTF8String: written as
# text (Java decodes their bytes as UTF-8, whatever the type); any other tag as #hex.
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPEES = ',=+<>#;"\\'
_PRINTABLE_EXTRA = set(" '()+,-./:=?")


def _read_tlv(data: bytes, pos: int) -> tuple[int, int, int, int]:
    """(tag, content start, content end, next position) of the DER element at ``pos``."""
    tag = data[pos]
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    end = pos + length
    if end > len(data):
        raise ValueError("truncated DER")
    return tag, pos, end, end


def _oid(content: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(a) for a in head + arcs[1:])


def _escape(text: str) -> str:
    chars: list[str] = []
    for c in text:
        if c in _ESCAPEES:
            chars.append("\\" + c)
        elif c == "\0":
            chars.append("\\00")
        else:
            chars.append(c)
    # Leading and trailing spaces (and CRs) are escaped too.
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in (" ", "\r"):
        trail -= 1
    return "".join(("\\" + c) if (i < lead or i > trail) else c for i, c in enumerate(chars))


def rfc2253_name(der_name: bytes) -> str:
    """A DER-encoded X.500 Name as Java's ``X500Principal.getName()`` (RFC 2253)."""
    tag, pos, end, _ = _read_tlv(der_name, 0)
    if tag != 0x30:
        raise ValueError("a Name is a SEQUENCE")
    rdns: list[str] = []
    while pos < end:
        _, set_pos, set_end, pos = _read_tlv(der_name, pos)
        avas: list[str] = []
        while set_pos < set_end:
            _, ava_pos, _, set_pos = _read_tlv(der_name, set_pos)
            _, oid_start, oid_end, value_pos = _read_tlv(der_name, ava_pos)
            oid = _oid(der_name[oid_start:oid_end])
            vtag, vstart, vend, vnext = _read_tlv(der_name, value_pos)
            keyword = _KEYWORDS.get(oid)
            if keyword is None or vtag not in _STRING_TAGS:
                value = "#" + der_name[value_pos:vnext].hex()
            else:
                value = _escape(der_name[vstart:vend].decode("utf-8", "replace"))
            avas.append(f"{keyword or oid}={value}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def principal_from_certificate(der_cert: bytes, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """``User:<mapped subject>`` of a DER certificate (Kafka's DefaultKafkaPrincipalBuilder)."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der_cert)
    return KafkaPrincipal("User", mapper.name(rfc2253_name(cert.subject.public_bytes())))
