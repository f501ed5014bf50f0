"""Releasing pipelines that no consumer uses: ``IdleRelease``.

A trainer that finished (or died without a word) leaves its pipeline hosted, counting
toward ``limits.max_pipelines``. A pipeline with no consumer stream for longer than
``limits.idle_release_s`` is released: checkpointed at its consumer's acknowledged
position, closed and no longer hosted. Its name and checkpoints stay in Redis, as a dead
server's do, so a later ``open`` (or ``conveyor restore``) resumes it where its trainer
stood, on any server; a pipeline without checkpointing has no position to resume, so its
name is freed (a later ``open`` creates it again). A stream asked of it here afterwards is
UNAVAILABLE, naming why, and a client fails over as from a server that is gone.
"""

from __future__ import annotations

import logging
import time

from conveyor.errors import ConveyorError, Unavailable
from conveyor_server.service.handlers import ConveyorService
from conveyor_server.service.hosted import HostedPipeline

log = logging.getLogger("conveyor.server")


class IdleRelease:
    def __init__(self, service: ConveyorService, idle_release_s: float) -> None:
        self.service = service
        # Kept by the hosted pipelines, whose full-server refusal names it too.
        service.pipelines.idle_release_s = idle_release_s

    @property
    def idle_release_s(self) -> float:
        """Seconds without a consumer before a pipeline is released (0: never)."""
        return self.service.pipelines.idle_release_s

    def release_due(self) -> list[str]:
        """Release every pipeline idle for longer than the limit; the names released."""
        if self.idle_release_s <= 0:
            return []
        now = time.monotonic()
        due = [h for h in self.service.pipelines.all()
               if h.ended is None and not h.deleting
               and (h.idle_seconds(now) or 0.0) > self.idle_release_s]
        return [h.name for h in due if self.release(h)]

    def release(self, hosted: HostedPipeline) -> bool:
        """Release ``hosted`` if it is still idle; whether it was."""
        service = self.service
        checkpointing = hosted.engine.spec.enable_checkpointing
        try:
            stored = service.checkpoints.for_drain(hosted) if checkpointing else None
        except ConveyorError as exc:
            log.warning("pipeline %s is idle but could not be checkpointed, so it stays "
                        "hosted: %s", hosted.name, exc.message,
                        extra={"pipeline": hosted.name, "error": exc.message})
            return False
        idle = hosted.idle_seconds()
        message = (f"pipeline {hosted.name!r} was released by server {service.address} after "
                   f"{idle or 0.0:.0f} s without a consumer (limits.idle_release_s = "
                   f"{self.idle_release_s:g}); ")
        message += ("its checkpoints are kept: open it again (Client.open, or `conveyor "
                    "restore`) to resume where its consumer stood" if checkpointing else
                    "it had no checkpointing, so its name is free: open it again to start "
                    "it afresh")
        with hosted.cond:
            if hosted.streaming or hosted.deleting or hosted.ended is not None:
                return False  # a consumer came back meanwhile
            hosted.deleting = True  # (the fencing watcher leaves it alone)
            hosted.end(message, Unavailable)
        if not checkpointing:
            try:
                service.store.release(hosted.name, service.instance, True,
                                      generation=hosted.generation)
            except ConveyorError as exc:
                log.warning("could not free the name of idle pipeline %s: %s", hosted.name,
                            exc.message, extra={"pipeline": hosted.name,
                                                "error": exc.message})
        service.pipelines.remove(hosted, released=message)
        hosted.close()
        log.info("released idle pipeline %s after %.0f s without a consumer (%s)",
                 hosted.name, idle or 0.0,
                 f"checkpoint {stored.id} at batch {stored.batches}" if stored is not None
                 else "no checkpointing: name freed",
                 extra={"pipeline": hosted.name,
                        "checkpoint_id": stored.id if stored is not None else ""})
        return True
