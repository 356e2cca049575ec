"""Consumer groups (KIP-848): the coordinator assigns partitions itself.

See ``manager.py`` for how a ConsumerGroupHeartbeat is handled; the server-side assignors
live in ``assignors/``.
"""
