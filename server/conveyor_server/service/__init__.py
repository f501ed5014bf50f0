"""The service room: the gRPC side of the server.

Holds the RPC handlers (``handlers.py``), registered from the generated descriptors with
their kinds checked (``registration.py``, ``rpc_kinds.py``); the stream's send loop and
acknowledgements (``stream.py``); batches computed for a pipeline held elsewhere, for its
trainer's fan-in (``compute.py``); the hosted pipelines (``hosted.py``); writing checkpoints
(``checkpoints.py``); the readers' file listings kept in Redis (``listings.py``); the one
mapping of domain errors to status codes (``status.py``); the interceptors for
authentication and RPC metrics (``interceptors.py``); who is calling (``identity.py``, with
the tokens of ``tokens.py``) and what it may do with a pipeline (``access.py``); the
server's TLS certificates, read again when they change (``tls.py``); what the service
reports for metrics (``observer.py``); the lifecycle: fencing watcher, drain, signals
(``lifecycle.py``); and the server's assembly (``server.py``).

Imports: the engine and store rooms, the ``conveyor`` client package and libraries; never
the app room (configuration and metrics come in as arguments).
"""
