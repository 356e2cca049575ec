"""A node that uses every core: ``kgc.workers`` = N > 1 worker processes on one data directory.

How this works: Python's GIL keeps one process on one core, so ``kgc serve`` with
``kgc.workers`` (``--kgc-workers``, ``KGC_KGC_WORKERS``; default 1, one process exactly as
before) becomes a supervisor (``supervisor``) of N forked worker processes. Each worker is a
broker of its own, routed as a cluster is routed:

* worker i has node id node.id + i and listens on every configured listener at port + i
  (advertised listeners, advertised.port and metrics.port + i too), so worker 0 keeps the
  configured ports and the bootstrap address is unchanged (``layout``);
* each worker leads a fixed share of the partitions: partition p of a coordinator's topic
  (offsets, transaction state, share state) is worker p % N's, topic partition (t, p)
  worker (crc32(t) + p) % N's (``placement.worker_of``); Metadata and FindCoordinator
  answer from a ``WorkerPlacement`` listing the N workers, so clients go to the owner, and
  a request for another worker's partition is answered NOT_LEADER_OR_FOLLOWER /
  NOT_COORDINATOR as Kafka answers it (``worker``);
* the workers reach each other as a cluster's nodes do, over the inter-broker client at
  the inter-broker listener's port + i (``cluster.peers``): transaction markers to each
  partition's worker, AddPartitionsToTxn verification at each transactional id's, share
  partitions' state at the worker of its ``__share_group_state`` partition;
* one writer per partition: a worker opens and creates only its own partitions, under its
  own lock file ``.lock.w<i>`` and its own journal ``journal.w<i>``; the supervisor holds the
  data directory's ``.lock`` for its life (inherited by the workers), so N, and with it who
  owns what, cannot change while any worker runs (``storage.local.manager``);
* what is not a partition is shared through the data directory's files, changed under one
  ``flock`` and polled by every worker (``shared``): the topic catalog, ACLs, SCRAM
  credentials, group configs, and producer ids (blocks taken from one counter file).

The embedded start's process-wide state (``node.embedded``), piece by piece:

==========================  ==========================================================
TLS contexts, listeners     per worker, every listener at port + i
Flusher, journal            per worker (``journal.w<i>``)
LogManager, ``.lock``       per worker (``.lock.w<i>``, its own partitions only); the
                            supervisor holds ``.lock``
catalog ``reconcile``       once, in the supervisor, before any worker starts
topic catalog               shared file (``WorkerCatalog``)
SCRAM credentials, ACLs     shared files (``WorkerCredentialStore``, ``WorkerAclStore``)
group configs               shared file (``WorkerGroupConfigs``)
producer ids                blocks from the shared counter file
group shard and runtime     per worker: its offsets partitions (``acquire``)
transaction coordinator     per worker: its ``__transaction_state`` partitions; markers
                            and verification to the other workers (inter-broker client)
share coordinator           per worker: its ``__share_group_state`` partitions; the
                            others' through their APIs (``share.remote``)
data plane, retention       per worker: its topic partitions (``acquire``)
compaction                  per worker: the logs it opened
``__consumer_offsets`` read per worker: the partitions it coordinates
broker                      per worker, ``WorkerPlacement`` (Metadata, FindCoordinator)
admin APIs                  per worker over the shared stores; DescribeLogDirs and
                            ListGroups answer for the worker (per broker, as in Kafka)
metrics                     per worker at metrics.port + i
cluster id                  the same setting everywhere
==========================  ==========================================================

Start-up: the supervisor takes ``.lock``, reconciles the topic catalog with the partition
directories and, after an unclean stop, replays every journal into every log in one process
(the partitions' owners may differ from the last run's), then forks the workers and waits
until each listens. A worker that dies is started again (it replays its own journal and
partitions); SIGTERM/SIGINT stop every worker cleanly.
"""
