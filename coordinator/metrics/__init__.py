"""Prometheus metrics for kgc, served over HTTP on ``--metrics-port`` (default 9404, 0 = off).

How this works, one module per concern:

* registry.py -- ``Metrics``: the registry, the hot-path request accounting (``on_request``)
  and the hooks components report events to;
* requests.py -- the per-(API, version) counters and latency buckets ``on_request`` bumps;
* collector.py -- the scrape-time families, read from the live components, never mirrored;
* lag.py -- consumer lag per (group, topic, partition), computed in slices at scrape time;
* http.py -- the exposition: prometheus_client's WSGI app on a daemon thread, collection on
  the event loop, ``/healthz``.
"""

from coordinator.metrics.http import MetricsUnavailableError
from coordinator.metrics.registry import Metrics

__all__ = ["Metrics", "MetricsUnavailableError"]
