"""Share groups' data side (KIP-932): share partitions, their sessions and durable state.

``persister`` is the seam the group coordinator codes against (Kafka's share coordinator
APIs as in-process calls); ``combine`` and ``state_shard`` are the share coordinator's pure
core over ``__share_group_state``'s records; ``coordinator`` runs it over a log.
"""
