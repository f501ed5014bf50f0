"""The remote side: pipelines on servers, and the fleet of servers, on top of the transport.

From the bottom up, each module importing only those above it in this list:

- ``placement.py``: where a new pipeline goes (two random choices weighted by capacity);
- ``cluster.py``: the servers a client knows, a connection to each, and calls with
  failover (the first server that answers) or placement;
- ``calls.py``: the pipeline and checkpoint calls over a cluster (create, restore,
  resume, describe, list, checkpoint, delete) and the ``Checkpoint`` they return;
- ``fan_in_worker.py``, ``fan_in.py``: one trainer's batches computed by several servers;
- ``pipeline.py``: ``RemotePipeline``, a pipeline on a server consumed like the engine,
  following its holder and failing over;
- ``opening.py``: ``Client.open``, a trainer's first start and every start after.

``conveyor.client.Client`` is the facade on top of them.

Imports: ``transport``, ``definition`` (a spec and its fingerprint), ``conveyor.errors``,
``conveyor.tensor_list``, the generated messages; never ``client`` or an adapter.
"""
