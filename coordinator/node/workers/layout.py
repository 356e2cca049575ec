"""Who worker i is: its settings (node id, ports) and every worker's broker address.

How this works: worker i runs with the node's settings changed in four places, all by +i:
``node.id``, the port of every listener (``listeners``, or ``port``), of every advertised
listener and ``advertised.port``, and ``metrics.port`` (each worker serves its own metrics).
Worker 0 therefore is the configured node, and a client bootstrapping there learns the other
workers from Metadata. ``config.Settings`` refuses kgc.workers > 1 with a port 0 or a port
that would pass 65535, so every worker's address is known before any of them binds, and
each worker can list all of them (``worker_nodes``) without asking the others.
"""

from __future__ import annotations

from coordinator.config import Settings, parse_listeners
from coordinator.placement import NodeAddress, advertised_address, advertised_endpoints

__all__ = ["shift_listeners", "worker_node", "worker_nodes", "worker_settings"]


def shift_listeners(value: str, by: int, name: str = "listeners") -> str:
    """``NAME://host:port,...`` with every port moved by ``by``."""
    out = []
    for listener, host, port in parse_listeners(value, name):
        shown = f"[{host}]" if ":" in host else host
        out.append(f"{listener}://{shown}:{port + by}")
    return ",".join(out)


def worker_settings(settings: Settings, index: int) -> Settings:
    """Worker ``index``'s settings: node id, listener, advertised and metrics ports + index."""
    if index == 0:
        return settings
    s = settings
    update: dict[str, object] = {"node_id": s.node_id + index}
    if s.listeners is None:
        update["port"] = s.port + index
    else:
        update["listeners"] = shift_listeners(s.listeners, index)
    if s.advertised_listeners is not None:
        update["advertised_listeners"] = shift_listeners(
            s.advertised_listeners, index, "advertised.listeners"
        )
    if s.advertised_port is not None:
        update["advertised_port"] = s.advertised_port + index
    if s.metrics_port:
        update["metrics_port"] = s.metrics_port + index
    return s.model_copy(update=update)


def worker_node(s: Settings) -> NodeAddress:
    """A worker's broker entry (its ``worker_settings``), as the broker itself advertises it."""
    specs = s.listener_specs
    endpoints = advertised_endpoints(s, {spec.name: spec.port for spec in specs})
    host, port = advertised_address(s, s.advertised_port or specs[0].port)
    return NodeAddress(
        s.node_id,
        host,
        port,
        s.broker_rack,
        tuple((name, h, p) for name, (h, p) in endpoints.items()),
    )


def worker_nodes(settings: Settings) -> list[NodeAddress]:
    """Every worker's broker entry, worker 0 first (``WorkerPlacement``'s nodes)."""
    return [worker_node(worker_settings(settings, i)) for i in range(settings.kgc_workers)]
