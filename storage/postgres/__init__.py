"""The PostgreSQL engine: the shared log, leases with fencing epochs, node registry, catalog."""
