"""The PostgreSQL engine: the shared log, leases with fencing epochs, node registry, catalog."""


class StartupRefused(RuntimeError):
    """The database says this node must not start (its message says why and what to do)."""
