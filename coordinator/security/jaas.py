"""Kafka's JAAS configuration line (``sasl.jaas.config``), parsed as Kafka's JaasConfig does.

How this works: a value is one or more entries ``<LoginModuleClass> <flag> key=value ... ;``
where the flag is ``required``, ``requisite``, ``sufficient`` or ``optional`` and values are
words or quoted strings (``"..."`` or ``'...'``, with Java's backslash escapes). ``//`` and
``/* */`` comments are skipped. Kafka tokenizes with ``java.io.StreamTokenizer``; this
tokenizer follows it where a real configuration can tell: a word is letters, digits and
``_ - $ .`` starting with a letter, ``_`` or ``$``; an unquoted value that starts with a digit
is a number token there, which Kafka refuses ("Value not specified for key"), so it is refused
here too. A broker's ``sasl.jaas.config`` must hold exactly one login module (Kafka's
JaasContext rule); ``parse_single`` enforces it.

Errors are ``ValueError`` with Kafka's messages; they never include the values (a JAAS line
holds passwords).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CONTROL_FLAGS", "JaasEntry", "parse", "parse_single"]

CONTROL_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)


class _Token:
    __slots__ = ("kind", "text")

    def __init__(self, kind: str, text: str) -> None:
        self.kind = kind  # "word", "quoted", "number" or the punctuation character itself
        self.text = text


def _is_word_start(ch: str) -> bool:
    return ch.isalpha() or ch in "_$" or ord(ch) >= 160


def _is_word_part(ch: str) -> bool:
    return _is_word_start(ch) or ch.isdigit() or ch in ".-"


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch <= " ":
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch in "\"'":
            i, value = _quoted(text, i + 1, ch)
            out.append(_Token("quoted", value))
        elif _is_word_start(ch):
            start = i
            while i < n and _is_word_part(text[i]):
                i += 1
            out.append(_Token("word", text[start:i]))
        elif ch.isdigit() or ch in ".-":
            start = i
            i += 1
            while i < n and (text[i].isdigit() or text[i] == "."):
                i += 1
            out.append(_Token("number", text[start:i]))
        else:
            out.append(_Token(ch, ch))
            i += 1
    return out


def _quoted(text: str, i: int, quote: str) -> tuple[int, str]:
    """A quoted string from after its opening quote; StreamTokenizer ends an unterminated
    one at the end of the line."""
    buf: list[str] = []
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == quote:
            return i + 1, "".join(buf)
        if ch == "\n":
            return i, "".join(buf)
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if "0" <= nxt <= "7":  # up to three octal digits (at most \377)
                j = i + 1
                limit = j + (3 if nxt <= "3" else 2)
                while j < min(limit, n) and "0" <= text[j] <= "7":
                    j += 1
                buf.append(chr(int(text[i + 1 : j], 8)))
                i = j
                continue
            buf.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        buf.append(ch)
        i += 1
    return i, "".join(buf)


def parse(text: str) -> list[JaasEntry]:
    """Every login-module entry of a JAAS configuration value (Kafka's JaasConfig)."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    pos = 0
    while pos < len(tokens):
        module = tokens[pos]
        pos += 1
        if pos >= len(tokens):
            raise ValueError("Login module control flag not specified in JAAS config")
        flag = tokens[pos].text
        pos += 1
        if flag.lower() not in CONTROL_FLAGS:
            raise ValueError(f"Invalid login module control flag '{flag}' in JAAS config")
        options: dict[str, str] = {}
        while pos < len(tokens) and tokens[pos].kind != ";":
            key = tokens[pos].text
            pos += 1
            if (
                pos + 1 >= len(tokens)
                or tokens[pos].kind != "="
                or tokens[pos + 1].kind not in ("word", "quoted")
            ):
                raise ValueError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = tokens[pos + 1].text
            pos += 2
        if pos >= len(tokens):
            raise ValueError("JAAS config entry not terminated by semi-colon")
        pos += 1  # the ';'
        entries.append(JaasEntry(module.text, flag.lower(), options))
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    return entries


def parse_single(text: str, name: str = "sasl.jaas.config") -> JaasEntry:
    """A broker's ``sasl.jaas.config``: exactly one login module (Kafka's JaasContext)."""
    entries = parse(text)
    if len(entries) != 1:
        raise ValueError(
            f"{name}: JAAS config property contains {len(entries)} login modules, "
            "should be 1 module"
        )
    return entries[0]
