"""What client and server agree on about the gRPC channel, in one place.

- the largest message either side sends or accepts, as channel options;
- the service's full name and the StreamBatches method path;
- the metadata keys: ``authorization`` (``Bearer TOKEN``) and the trailing keys a drained
  stream carries (the checkpoint to resume from);
- ``host:port`` addresses, parsed one way everywhere;
- the standard health check: one ``health_status`` call, and ``wait_serving``, which polls
  it until the server says SERVING.
"""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conveyor.errors import InvalidArgument, Unavailable
from conveyor.v1 import service_pb2

#: The largest message (a batch frame, a checkpoint, a spec) either side sends or accepts.
MAX_MESSAGE_BYTES = 64 << 20
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES))

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["Conveyor"].full_name
STREAM_BATCHES_PATH = f"/{SERVICE_NAME}/StreamBatches"

#: Request metadata: ``Bearer TOKEN`` when the server requires a token.
AUTHORIZATION_KEY = "authorization"
#: Trailing metadata of a stream ended by a drain: the checkpoint written at the consumer's
#: acknowledged position, and that position.
CHECKPOINT_ID_KEY = "conveyor-checkpoint-id"
CHECKPOINT_BATCHES_KEY = "conveyor-checkpoint-batches"

SERVING = health_pb2.HealthCheckResponse.SERVING


def bearer(token: str) -> str:
    """The ``authorization`` value that carries ``token``."""
    return f"Bearer {token}"


def host_port(address: str, key: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (or ``"[V6]:PORT"``) as (host, port); ``InvalidArgument`` naming
    ``key`` (the setting or argument the address came from) otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidArgument(f"{key}: {address!r} is not host:port")
    return host.strip("[]"), int(port)


def health_status(channel: grpc.Channel, service: str, timeout: float) -> int:
    """One grpc.health.v1 Check of ``service`` ("" is the whole server): the status it
    answers (``SERVING``, ``NOT_SERVING``, ...). ``grpc.RpcError`` when it does not."""
    stub = health_pb2_grpc.HealthStub(channel)
    reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
    return int(reply.status)


def wait_serving(address: str, timeout: float = 30.0, service: str = "") -> None:
    """Poll the health check of ``address`` until it answers SERVING; ``Unavailable``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        while True:
            try:
                if health_status(channel, service, 2.0) == SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"conveyor-server at {address} not SERVING after {timeout}s")
            time.sleep(0.02)
