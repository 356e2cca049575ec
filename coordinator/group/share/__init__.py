"""Share groups (KIP-932): membership as Kafka's group coordinator runs it.

``group.py`` the group and its members, ``replay.py`` their records, ``assignor.py`` the
``simple`` assignor, ``manager.py`` what changes groups besides a request,
``heartbeat.py`` ShareGroupHeartbeat, ``describe.py`` ShareGroupDescribe.
"""
