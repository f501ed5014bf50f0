"""What client and server agree on about the gRPC channel, in one place.

- the largest message either side sends or accepts, and HTTP/2 keepalive, as channel
  options;
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
from conveyor.transport.credentials import TlsOptions, open_channel
from conveyor.v1 import service_pb2

#: The largest message (a batch frame, a checkpoint, a spec) either side sends or accepts.
MAX_MESSAGE_BYTES = 64 << 20
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES))

#: HTTP/2 keepalive: a peer that stops answering pings (a dead node, a stopped process, a
#: partition without a TCP reset) is noticed within about ``time + timeout`` seconds.
KEEPALIVE_TIME_S = 10.0
KEEPALIVE_TIMEOUT_S = 10.0
#: The shortest ping interval a server accepts from a client (clients may ping this often).
MIN_CLIENT_PING_S = 1.0


def client_keepalive(time_s: float = KEEPALIVE_TIME_S,
                     timeout_s: float = KEEPALIVE_TIMEOUT_S) -> tuple[tuple[str, int], ...]:
    """Channel options that ping the server every ``time_s`` while a call is open, and
    fail the calls if it does not answer within ``timeout_s``."""
    return (("grpc.keepalive_time_ms", int(max(time_s, MIN_CLIENT_PING_S) * 1000)),
            ("grpc.keepalive_timeout_ms", int(timeout_s * 1000)),
            # Any ping (gRPC's bandwidth probes too) left unanswered this long fails the
            # connection; otherwise a probe in flight holds the keepalive back for 60 s.
            ("grpc.http2.ping_timeout_ms", int(timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0))


def server_keepalive(time_s: float = KEEPALIVE_TIME_S,
                     timeout_s: float = KEEPALIVE_TIMEOUT_S) -> tuple[tuple[str, int], ...]:
    """Server options: ping each client every ``time_s``, drop it if it does not answer
    within ``timeout_s`` (its streams end, freeing the pipeline for a new consumer), and
    accept the clients' own pings down to ``MIN_CLIENT_PING_S`` apart."""
    return (("grpc.keepalive_time_ms", int(time_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(timeout_s * 1000)),
            # Any ping (gRPC's bandwidth probes too) left unanswered this long fails the
            # connection; otherwise a probe in flight holds the keepalive back for 60 s.
            ("grpc.http2.ping_timeout_ms", int(timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", int(MIN_CLIENT_PING_S * 1000)),
            ("grpc.http2.max_ping_strikes", 0))


SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["Conveyor"].full_name
STREAM_BATCHES_PATH = f"/{SERVICE_NAME}/StreamBatches"
COMPUTE_BATCHES_PATH = f"/{SERVICE_NAME}/ComputeBatches"

#: Request metadata: ``Bearer TOKEN``, the caller's token.
AUTHORIZATION_KEY = "authorization"
#: Initial metadata of every Conveyor call: the address the answering server advertises
#: (its name in the fleet's records and as a pipeline's holder), so that a client can match
#: that name to the address it reached the server at.
SERVER_NAME_KEY = "conveyor-server"
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


def wait_serving(address: str, timeout: float = 30.0, service: str = "",
                 tls: TlsOptions | None = None) -> None:
    """Poll the health check of ``address`` (over TLS with ``tls``) until it answers
    SERVING; ``Unavailable`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with open_channel(address, tls) as channel:
        while True:
            try:
                if health_status(channel, service, 2.0) == SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"conveyor-server at {address} not SERVING after {timeout}s")
            time.sleep(0.02)
