"""Assemble and run the gRPC server: ``create_server`` apart from ``serve``.

``create_server(address, ...) -> (server, port)`` binds (port 0 picks a free one) and adds
the Conveyor service, the standard health service and reflection; the service updates
``metrics`` (``conveyor_server.metrics.Metrics``; a private one if None). ``Runtime`` adds
the fencing watcher and the SIGTERM drain.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from types import FrameType

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from conveyor.errors import ConveyorError
from conveyor.v1 import service_pb2
from conveyor_server.limits import NO_LIMITS, EngineLimits
from conveyor_server.metrics import Metrics
from conveyor_server.service import ConveyorService
from conveyor_server.store import Store

log = logging.getLogger("conveyor.server")

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["Conveyor"].full_name
MAX_MESSAGE_BYTES = 64 << 20


def create_server(
    address: str, store: Store, data_roots: Sequence[str | Path], *, advertise: str | None = None,
    keep_checkpoints: int = 10, max_pipelines: int = 64, token: str | None = None,
    max_workers: int = 64, drain_wait: float = 5.0, limits: EngineLimits = NO_LIMITS,
    metrics: Metrics | None = None,
) -> tuple[grpc.Server, int, ConveyorService, health.HealthServicer]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="conveyor-rpc"),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                 ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                 ("grpc.so_reuseport", 0)])
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address}: the port is in use or not allowed")
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        import socket
        host = socket.gethostname()
    service = ConveyorService(store, advertise or f"{host}:{port}", data_roots,
                              keep_checkpoints=keep_checkpoints, max_pipelines=max_pipelines,
                              token=token, drain_wait=drain_wait, limits=limits,
                              metrics=metrics)
    server.add_generic_rpc_handlers((conveyor_handler(service),))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME), server)
    return server, port, service, health_servicer


def _serialize_frame(message: object) -> bytes:
    """Stream frames arrive already encoded (see ``conveyor.wire``); anything else is a
    message to serialize."""
    return message if isinstance(message, bytes) else message.SerializeToString()  # type: ignore[attr-defined]


def conveyor_handler(servicer: ConveyorService) -> grpc.GenericRpcHandler:
    """The service's handlers, read from its descriptor, as the generated
    ``add_ConveyorServicer_to_server`` would build them, except that StreamBatches frames
    are sent as the bytes the stream encoded, without another copy through a message."""
    service = service_pb2.DESCRIPTOR.services_by_name["Conveyor"]
    handlers = {}
    for method in service.methods:
        request = getattr(service_pb2, method.input_type.name)
        response = getattr(service_pb2, method.output_type.name)
        behaviour = getattr(servicer, method.name)
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                behaviour, request_deserializer=request.FromString,
                response_serializer=_serialize_frame)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                behaviour, request_deserializer=request.FromString,
                response_serializer=response.SerializeToString)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class Runtime:
    """A started server with its fencing watcher; ``drain`` is the SIGTERM path."""

    def __init__(self, server: grpc.Server, service: ConveyorService,
                 health_servicer: health.HealthServicer, *, watch_interval: float = 0.2) -> None:
        self.server = server
        self.service = service
        self.health = health_servicer
        self.watch_interval = watch_interval
        self.stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="fencing-watcher", daemon=True)

    def start(self, *, serving: bool = True) -> None:
        """Start answering; health says SERVING at once, or once ``set_serving()`` is
        called (after the pipelines of the configuration are built)."""
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server.start()
        self._watcher.start()
        if serving:
            self.set_serving()

    def set_serving(self) -> None:
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def _watch(self) -> None:
        """Poll the owners of hosted pipelines; end the streams of those restored elsewhere.
        A Redis outage is ignored here: running streams go on."""
        while not self.stopped.wait(self.watch_interval):
            hosted = [h for h in self.service.hosted() if h.ended is None]
            if not hosted:
                continue
            try:
                owners = self.service.store.owners([h.name for h in hosted])
            except ConveyorError:
                continue
            for h in hosted:
                owner = owners.get(h.name)
                if owner is None:
                    self.service.fence(h, None)
                elif owner.instance != self.service.instance:
                    self.service.fence(h, owner.holder)

    def drain(self, grace: float) -> None:
        """NOT_SERVING; checkpoint every pipeline at its acknowledged position and end each
        stream with UNAVAILABLE carrying that checkpoint's id; then stop."""
        log.info("draining: checkpointing pipelines and ending streams")
        self.health.enter_graceful_shutdown()
        self.service.draining.set()
        # Streams checkpoint themselves as they end; the rest are checkpointed once every
        # stream is over, so a stream that was ending anyway is not missed.
        self.server.stop(grace).wait(grace + 1)
        for hosted in self.service.hosted():
            if hosted.drain_checkpoint:
                continue
            try:
                stored = self.service.checkpoint_at_acknowledged(hosted)
            except ConveyorError as exc:
                log.warning("could not checkpoint %s while draining: %s", hosted.name, exc,
                            extra={"pipeline": hosted.name, "error": exc.message})
                continue
            if stored is not None:
                log.info("drained %s at batch %d: %s", hosted.name, stored.batches, stored.id,
                         extra={"pipeline": hosted.name, "checkpoint_id": stored.id,
                                "batches": stored.batches})
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        self.server.stop(0)
        for hosted in self.service.hosted():
            hosted.engine.close()

    def install_signal_handlers(self, grace: float) -> None:
        def on_term(signum: int, frame: FrameType | None) -> None:
            threading.Thread(target=self.drain, args=(grace,), name="drain").start()
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
