"""Offsets audit of a kgc data directory on Apache Spark (the optional ``kgc[audit]`` extra).

How this works: ``decode`` is the executor-side segment decoder (kgc's own ``storage`` codecs
plus the audit's numpy decoders over them in ``columns``, no pyspark import); ``stitch`` joins
the segments' summaries into report rows; ``job`` lists the data directory, decodes every
segment in its own Spark task and derives the ``partitions``, ``groups`` and ``findings`` tables;
``source_pg`` is the other source, a cluster's PostgreSQL (``--storage-url``): its rows read
over JDBC and decoded by the same decoder, each row like a small segment;
``cli`` is ``kgc audit`` / ``python -m coordinator.audit`` (also runnable with spark-submit).
Importing this package does not import pyspark.
"""
