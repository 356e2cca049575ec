"""Regular-expression subscriptions (``SubscribedTopicRegex``), matched on the server as Kafka does.

How this works: Kafka compiles the pattern with Google's RE2 (RE2/J) and keeps a topic when
the *whole* name matches; we use the RE2 library itself (google-re2), so the accepted syntax
and the matches are RE2's, not Python's ``re`` (no backreferences, no lookaround). Internal
topics are not filtered out: ``.*`` matches ``__consumer_offsets`` too, as in Kafka.
Compiled patterns are cached: every group resolves its patterns again whenever topics are
created.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import re2

__all__ = ["InvalidRegex", "compile_regex", "resolve"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every bad pattern to stderr


class InvalidRegex(ValueError):
    pass


# RE2's error texts (re2/regexp.cc CodeText) -> RE2/J's (Parser.ERR_*).
_RE2J_DESCRIPTIONS = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
}


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> re2._Regexp:
    """The compiled pattern; ``InvalidRegex`` carries RE2's description of what is wrong."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        # Kafka's message carries RE2/J's description (PatternSyntaxException.getDescription):
        # the error's name only, worded as RE2/J (Go's regexp/syntax) words it.
        code = str(detail).split(": ", 1)[0]
        raise InvalidRegex(_RE2J_DESCRIPTIONS.get(code, code)) from None


def resolve(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topics whose whole name matches ``pattern`` (nothing if it does not compile)."""
    try:
        rx = compile_regex(pattern)
    except InvalidRegex:
        return frozenset()
    return frozenset(n for n in topic_names if rx.fullmatch(n) is not None)
