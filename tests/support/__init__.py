"""The tests' shared helpers, one package: ``from support.kgc_process import KgcProcess``.

How this works: pytest puts ``tests/`` on the import path (``pythonpath`` in pyproject.toml,
after the checkout's root so the folders ``tests/storage`` and ``tests/protocol`` never stand
in for the packages); the benchmarks get the same through ``bench/checkout.py``. Test modules
themselves are imported by pytest with ``--import-mode=importlib`` and never import each
other: what two test modules share lives here.

What is where:

* a real process to test against: ``kgc_process`` (``kgc serve``), ``workerskit``
  (``--kgc-workers``), ``clusterkit`` (N nodes on PostgreSQL), ``pgserver`` (PostgreSQL),
  ``kafkaserver`` (Apache Kafka, the reference), ``certkit`` (TLS material);
* clients and load: ``groupkit`` (topics, waiting, consumers), ``dataplanekit`` (keyed
  messages, order), ``crashkit`` (acknowledged load and what survived), ``consumer848kit`` and
  ``kip848kit`` (KIP-848 librdkafka members), ``javakit`` (the Java test clients);
* the pure group core: ``group_context`` (GroupContext: both group types, fake clock) and
  ``consumer_member`` (a KIP-848 client over it);
* in process, no sockets: ``brokernodekit`` (a node's broker, groups and data plane over real
  logs) and ``planenodekit`` (the data plane on either engine, record batches);
* per suite: ``diffkit`` and ``groupops`` (differential), with ``diffplanekit`` (Produce and
  ListOffsets requests), ``difftxnkit`` (the transaction coordinator's requests) and
  ``diffstreamskit`` (streams-group heartbeats), ``wordcountkit`` (the Kafka Streams word
  count's JVMs and topics), ``faultkit`` (faults), ``tools_kit``
  and ``tools_setup`` (Kafka's tools), ``clikit`` (the CLI), ``nodekit`` (cluster objects),
  ``pgjournal_kit`` (the PostgreSQL journal), ``oauthkit`` (OAUTHBEARER), ``logbuilder`` and
  ``auditkit`` (the offsets audit).
"""
