"""Assemble the gRPC server: ``create_server`` apart from serving it (``lifecycle.Runtime``).

``create_server(address, store, data_roots, observer=...)`` binds (port 0 picks a free
one; over TLS with ``credentials``, see ``tls.py``) and adds the Conveyor service with its
interceptors (RPC metrics, then authentication: ``authenticator``, by default the
loopback-only mode of ``identity.py``, then the server's advertised name sent to the
caller), the standard health service and, when
``reflection`` is on, server reflection. It returns the server, its port, the servicer and
the health servicer. ``serve_health`` serves that health servicer alone on a plaintext
port, for probes that cannot speak TLS. With spec bounds in ``limits``, the server reads no
request larger than they allow (a Restore with the largest checkpoint and spec); gRPC
refuses a larger one with RESOURCE_EXHAUSTED before it is parsed. With ``data_port``
settings it also listens on the data port (``data_port.py``; TLS with ``certificates``,
the files of ``credentials``), which ``service.streams.data_port`` holds.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection as server_reflection

from conveyor.transport.channel import (
    CHANNEL_OPTIONS,
    KEEPALIVE_TIME_S,
    KEEPALIVE_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    SERVICE_NAME,
    server_keepalive,
)
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.identity.behaviour.measure import Behaviour
from conveyor_server.engine.stages.source_callables import NONE_REGISTERED, ExternalSources
from conveyor_server.service.data_port import DataPort, DataPortSettings
from conveyor_server.service.handlers import ConveyorService
from conveyor_server.service.identity import Authenticator
from conveyor_server.service.interceptors import Authentication, RpcMetrics, ServerName
from conveyor_server.service.kill_points import NO_KILL_POINTS, KillPoints
from conveyor_server.service.observer import ServiceObserver
from conveyor_server.service.registration import service_handler
from conveyor_server.service.stream_slots import FIRST_MESSAGE_S, StreamSlots
from conveyor_server.service.tls import CertificateFiles
from conveyor_server.store.store import Store


def create_server(
    address: str, store: Store, data_roots: Sequence[str | Path], *,
    observer: ServiceObserver, advertise: str | None = None, keep_checkpoints: int = 10,
    max_pipelines: int = 64, authenticator: Authenticator | None = None,
    credentials: grpc.ServerCredentials | None = None, reflection: bool = False,
    max_streams: int = 64,
    first_message_s: float = FIRST_MESSAGE_S,
    drain_wait: float = 5.0, limits: EngineLimits = NO_LIMITS,
    behaviour: Behaviour | None = None, worker_threads: int = 0,
    kill_points: KillPoints = NO_KILL_POINTS,
    keepalive: tuple[float, float] = (KEEPALIVE_TIME_S, KEEPALIVE_TIMEOUT_S),
    external_sources: ExternalSources = NONE_REGISTERED,
    data_port: DataPortSettings | None = None, certificates: CertificateFiles | None = None,
    objects: ObjectStores | None = None,
) -> tuple[grpc.Server, int, ConveyorService, health.HealthServicer]:
    if data_port is not None and credentials is not None and certificates is None:
        raise ValueError("create_server: a TLS server's data port needs its certificate "
                         "files (certificates), or it would serve batches in plaintext")
    slots = StreamSlots(max_streams, first_message_s)
    authenticator = authenticator or Authenticator()
    name = ServerName()
    interceptors: list[grpc.ServerInterceptor] = [RpcMetrics(observer),
                                                  Authentication(authenticator), name]
    server = grpc.server(
        # Streams hold a thread each: the pool keeps threads beyond the stream cap, so
        # unary RPCs and health checks are never starved by streams.
        futures.ThreadPoolExecutor(max_workers=slots.threads,
                                   thread_name_prefix="conveyor-rpc"),
        interceptors=interceptors,
        options=[*_message_options(limits), *server_keepalive(*keepalive),
                 ("grpc.so_reuseport", 0)])
    try:
        port = (server.add_insecure_port(address) if credentials is None
                else server.add_secure_port(address, credentials))
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address}: the port is in use or not allowed")
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    service = ConveyorService(store, advertise or f"{host}:{port}", data_roots,
                              observer=observer, keep_checkpoints=keep_checkpoints,
                              max_pipelines=max_pipelines,
                              slots=slots,
                              drain_wait=drain_wait,
                              limits=limits, behaviour=behaviour,
                              worker_threads=worker_threads, kill_points=kill_points,
                              external_sources=external_sources, objects=objects)
    name.address = service.address
    service.access.authenticator = authenticator
    if data_port is not None:
        port_of_data = DataPort(data_port, certificates)
        service.streams.data_port = service.compute.data_port = port_of_data
    server.add_generic_rpc_handlers((service_handler(service),))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection:
        server_reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
             server_reflection.SERVICE_NAME), server)
    return server, port, service, health_servicer


def serve_health(address: str, health_servicer: health.HealthServicer) -> tuple[grpc.Server,
                                                                                 int]:
    """Start a plaintext server on ``address`` with the health service only (the same
    servicer, so it says what the main port says); returns it and its port."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2,
                                                    thread_name_prefix="conveyor-health"),
                         options=[("grpc.so_reuseport", 0)])
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address} (health.listen): the port is in use or "
                      "not allowed")
    server.start()
    return server, port


def _message_options(limits: EngineLimits) -> list[tuple[str, int]]:
    """The channel's message limits, the largest request read bounded by ``limits.spec``."""
    if limits.spec is None:
        return list(CHANNEL_OPTIONS)
    receive = min(limits.spec.max_message_bytes, MAX_MESSAGE_BYTES)
    return [(key, receive if key == "grpc.max_receive_message_length" else value)
            for key, value in CHANNEL_OPTIONS]
