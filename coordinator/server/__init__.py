"""The server: everything between a client's socket and the components that answer it.

How this works, in the order a request meets it:

* ``listener`` -- listening sockets and accepting connections (with a reserve of file
  descriptors for the logs). TLS will wrap the accepted sockets here.
* ``transport`` -- one ``KafkaConnection`` per socket: framing, responses in request order,
  backpressure, bad input; ``memory`` bounds the request bytes queued across connections.
* ``handler`` -- the contract between the transport and whoever answers an API.
* ``broker`` -- the cluster-level APIs (Metadata, FindCoordinator, topic admin, SASL),
  ``apis`` the API versions kgc serves.

The group runtime (``coordinator.runtime``) and the data plane (``coordinator.dataplane``)
answer the other APIs through the same handler contract.
"""
