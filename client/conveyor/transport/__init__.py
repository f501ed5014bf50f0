"""The transport: talking to one server.

- ``channel.py``: a gRPC channel's options, keepalive and the bearer token's header;
- ``credentials.py``: TLS options and the token, from arguments or the environment;
- ``connection.py``: the connection to one server address (its channel, calls, streams,
  errors mapped to ``conveyor.errors``, and how a failed call is worded);
- ``data_channel.py``: a stream's batch bytes on a TCP connection to the data port;
- ``wire.py``: a batch's frames assembled into ``TensorList``s;
- ``acknowledgements.py``: a stream's opening request and its acknowledgements;
- ``allocator.py``: malloc settings for processes that receive batches.

Imports: ``conveyor.errors``, ``conveyor.tensor_list``, the generated messages, gRPC;
nothing of ``definition``, ``remote``, ``client`` or the adapters: a connection knows
nothing of the fleet or of pipelines.
"""
