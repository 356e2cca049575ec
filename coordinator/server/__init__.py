"""The server: everything between a client's socket and the parts that answer it.

How this works, in the order a request meets it:

* ``listener`` -- listening sockets and accepting connections, with a reserve of file
  descriptors kept for the logs; the TLS listeners wrap the accepted sockets here.
* ``transport`` -- one ``KafkaConnection`` per socket: the asyncio protocol over
  ``connection``, which holds the rules and no I/O: framing, responses in request order,
  backpressure, bad input; ``memory`` bounds the request bytes queued across connections;
  on a SASL listener ``sasl`` answers every frame until the connection has authenticated.
* ``dispatch`` -- the routes: which handler answers each API key and version, built from
  the API table of ``coordinator.apis``.
* ``handler`` -- the contract between the transport and whoever answers an API: what a
  handler is given and the one typed result it returns.

The handlers are ``coordinator.apis``' (over the group runtime, the data plane and the
stores), all under that contract; ``coordinator.node`` assembles them. Nothing here imports
them: the server is the transport only.
"""
