"""Storage URLs as shown to people: the password never leaves the process.

How this works: a ``postgresql://user:password@host/db`` URL names where a node keeps its
state; log lines, refusals, reports and audits print it with the password replaced by
``***``. It lives outside the engines so the configuration and its reports can show a URL
without importing the PostgreSQL engine.
"""

from urllib.parse import urlsplit


def redact_url(storage_url: str) -> str:
    """A database URL without its password (for log lines, errors and reports)."""
    parts = urlsplit(storage_url)
    if parts.password is None:
        return storage_url
    user, host = parts.netloc.rsplit("@", 1)
    return parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}").geturl()
