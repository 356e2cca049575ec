"""Operator tools: the ``kgc`` command line (``cli``) and what it talks to a server with.

``admin`` holds the protocol-level admin operations behind ``kgc groups|offsets|topics|health``
and ``client`` the small blocking Kafka client they (and the tests and benchmarks) use. They
speak only the Kafka protocol, never kgc internals, so they work against any Kafka broker.
"""
