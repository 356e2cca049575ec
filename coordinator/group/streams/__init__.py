"""Streams groups (KIP-1071): Kafka Streams applications with ``group.protocol=streams``.

How this works: the members describe their topology; ``configure`` fits it to the cluster's
topics (partition counts of the internal topics, which to create, the status when it does
not fit); ``assignor`` spreads the tasks (active, standby) over the processes, sticky to the
previous target. Pure, like the rest of the group core: the caller hands in the topic image.
"""
