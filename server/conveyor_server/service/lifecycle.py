"""A started server's life: health, the fencing watcher, the SIGTERM drain and the stop.

``Runtime`` starts the gRPC server with health NOT_SERVING, then SERVING (at once, or once
``set_serving()`` is called after the configured pipelines are built). Its watcher polls
Redis for the owners of hosted pipelines and fences those restored or deleted elsewhere,
and releases those idle for too long (``idle.py``).
``drain`` is the SIGTERM path: NOT_SERVING, every stream checkpointed at its consumer's
acknowledged position and ended with that checkpoint's id, the rest checkpointed, stop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType

import grpc
from grpc_health.v1 import health, health_pb2

from conveyor.errors import ConveyorError
from conveyor.transport.channel import SERVICE_NAME
from conveyor_server.service.fleet import FleetPublisher
from conveyor_server.service.handlers import ConveyorService
from conveyor_server.service.idle import IdleRelease

log = logging.getLogger("conveyor.server")


class Runtime:
    def __init__(self, server: grpc.Server, service: ConveyorService,
                 health_servicer: health.HealthServicer, *, watch_interval: float = 0.2,
                 idle_release_s: float = 0.0) -> None:
        self.server = server
        self.service = service
        self.health = health_servicer
        self.watch_interval = watch_interval
        self.stopped = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="fencing-watcher", daemon=True)
        #: This server's record in the fleet, which clients place pipelines by.
        self.fleet = FleetPublisher(service)
        #: Releases pipelines without a consumer for longer than limits.idle_release_s.
        self.idle = IdleRelease(service, idle_release_s)

    def start(self, *, serving: bool = True) -> None:
        """Start answering; health says SERVING at once, or once ``set_serving()`` is
        called (after the pipelines of the configuration are built)."""
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server.start()
        self._watcher.start()
        self.fleet.start()
        if serving:
            self.set_serving()

    def set_serving(self) -> None:
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def _watch(self) -> None:
        """Poll the owners of hosted pipelines; end the streams of those restored elsewhere.
        Renew the leases every third of their length. A Redis outage is ignored here:
        running streams go on until their lease runs out."""
        pipelines = self.service.pipelines
        renewed = 0.0
        while not self.stopped.wait(self.watch_interval):
            if time.monotonic() - renewed >= self.service.store.lease / 3:
                renewed = time.monotonic()
                self._renew()
            self.idle.release_due()
            hosted = [h for h in pipelines.all() if h.ended is None]
            if not hosted:
                continue
            try:
                owners = self.service.store.owners([h.name for h in hosted])
            except ConveyorError:
                continue
            for h in hosted:
                owner = owners.get(h.name)
                if owner is None:
                    pipelines.fence(h, None)
                elif owner.instance != self.service.instance:
                    pipelines.fence(h, owner.holder)

    def _renew(self) -> None:
        store, pipelines = self.service.store, self.service.pipelines
        for hosted in [h for h in pipelines.all() if h.ended is None]:
            started = time.monotonic()
            try:
                holder = store.renew(hosted.name, self.service.instance)
            except ConveyorError:
                # Redis is out (tried over a failover already): the leases run down and
                # the streams stop when they end; the next round tries them all again.
                break
            if holder is None:
                hosted.lease_until = started + store.lease
            else:
                pipelines.fence(hosted, holder or None)

    def drain(self, grace: float) -> None:
        """NOT_SERVING; checkpoint every pipeline at its acknowledged position and end each
        stream with UNAVAILABLE carrying that checkpoint's id; then stop."""
        log.info("draining: checkpointing pipelines and ending streams")
        self.health.enter_graceful_shutdown()
        self.service.streams.draining.set()
        self.fleet.publish()  # draining: clients place no more pipelines here
        self.service.streams.checkpoint_streaming()
        # Streams checkpoint themselves as they end; the rest are checkpointed once every
        # stream is over, so a stream that was ending anyway is not missed.
        self.server.stop(grace).wait(grace + 1)
        for hosted in self.service.pipelines.all():
            if hosted.drained is not None:
                continue
            try:
                stored = self.service.checkpoints.for_drain(hosted)
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
        self.fleet.stop()
        self.server.stop(0)
        if self.service.streams.data_port is not None:
            self.service.streams.data_port.close()
        for hosted in self.service.pipelines.all():
            hosted.close()
        self.service.workers.shutdown(wait=False, cancel_futures=True)

    def install_signal_handlers(self, grace: float) -> None:
        def on_term(signum: int, frame: FrameType | None) -> None:
            threading.Thread(target=self.drain, args=(grace,), name="drain").start()
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
