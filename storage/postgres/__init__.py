"""The PostgreSQL engine: the shared log, leases with fencing epochs, node registry, catalog."""

from urllib.parse import urlsplit


def redact_url(storage_url: str) -> str:
    """A database URL without its password (for log lines, errors and reports)."""
    parts = urlsplit(storage_url)
    if parts.password is None:
        return storage_url
    user, host = parts.netloc.rsplit("@", 1)
    return parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}").geturl()


class StartupRefused(RuntimeError):
    """The database says this node must not start (its message says why and what to do)."""
