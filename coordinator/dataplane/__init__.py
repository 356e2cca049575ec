"""kgc's single-node data plane (Produce, Fetch, ListOffsets, InitProducerId).

How this works: ``plane.DataPlane`` answers the four APIs over the partition logs of the
shared ``LogManager``; ``producers`` holds idempotent-producer state and producer-id
allocation, ``reads`` the Produce payload validation and Fetch byte budgeting. See
``plane``'s docstring for the behaviour of each API.
"""

from coordinator.dataplane.plane import DataPlane

__all__ = ["DataPlane"]
