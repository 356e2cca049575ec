"""The parts of a node that answer requests, as the API table's handlers find them.

How this works: ``Parts`` names each part an API's handler calls (the group runtime, the
data plane, the broker's topic catalog view, the admin parts) and the authorizer's checks
(None: no authorizer, nothing is checked). A handler factory (``Factory``) takes the parts
and returns the API's handler, its authorization bound in; it raises ``MissingPart`` when
the part it needs is absent, so a test may build the handlers of the parts it has while a
node's start-up fails on any advertised API without its handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from coordinator.server.handler import Handler

if TYPE_CHECKING:
    from coordinator.apis.acls import AclAdmin
    from coordinator.apis.authorize import ApiAuthorizer
    from coordinator.apis.configs import ConfigAdmin
    from coordinator.apis.partitions import PartitionAdmin
    from coordinator.apis.scram import ScramAdmin
    from coordinator.apis.topics import Broker
    from coordinator.dataplane import DataPlane
    from coordinator.runtime import GroupRuntime, TxnRuntime
    from coordinator.share.admin import ShareAdmin
    from coordinator.share.requests import ShareRequests
    from coordinator.share.state_apis import ShareStateApis

__all__ = ["Factory", "MissingPart", "Parts", "need"]

T = TypeVar("T")


class MissingPart(LookupError):
    """An API's handler needs a part this node was not given."""


@dataclass(slots=True)
class Parts:
    broker: Broker | None = None  # Metadata, FindCoordinator, Create/DeleteTopics
    groups: GroupRuntime | None = None  # the group coordinator's APIs
    txn: TxnRuntime | None = None  # the transaction coordinator's APIs
    data: DataPlane | None = None  # Produce, Fetch, ListOffsets, InitProducerId
    partitions: PartitionAdmin | None = None  # CreatePartitions, DeleteRecords, DescribeCluster...
    configs: ConfigAdmin | None = (
        None  # Describe/Alter/IncrementalAlterConfigs, ListConfigResources
    )
    acls: AclAdmin | None = None  # Describe/Create/DeleteAcls
    scram: ScramAdmin | None = None  # Describe/AlterUserScramCredentials
    checks: ApiAuthorizer | None = None  # None: no authorizer, every request is allowed
    share: ShareRequests | None = None  # ShareFetch, ShareAcknowledge
    share_admin: ShareAdmin | None = None  # DescribeShareGroupOffsets
    share_state: ShareStateApis | None = None  # the share coordinator's inter-broker APIs


def need(part: T | None, name: str) -> T:
    if part is None:
        raise MissingPart(name)
    return part


# An API's handler, built from the parts (its authorization bound in).
Factory = Callable[[Parts], Handler]
