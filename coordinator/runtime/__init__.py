"""The runtime: where the pure group core meets the event loop, the clock and the log.

* ``group_runtime.py``: ``GroupRuntime`` turns a request into a call of the shard, applies
  its Result (records appended, replies released once durable, the one timer wake-up) and
  rebuilds a partition from its log when a write fails;
* ``txn_runtime.py``: ``TxnRuntime`` does the same for the transaction coordinator
  (``coordinator/txn``): ``__transaction_state`` writes durable before memory changes,
  replay with markers re-driven, marker delivery through the ``MarkerWriter`` seam, the
  timeout and id-expiry sweeps;
* ``replay.py``: reading an offsets partition back into the shard, every batch checked;
* ``responses.py``: the answers the runtime makes up itself for a failed append or fsync
  (a failed handler is answered in its API's error shape, ``protocol/error_responses.py``).
"""

from coordinator.runtime.group_runtime import GroupRuntime
from coordinator.runtime.txn_runtime import TxnRuntime

__all__ = ["GroupRuntime", "TxnRuntime"]
