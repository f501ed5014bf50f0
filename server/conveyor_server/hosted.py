"""One pipeline hosted by this server: its engine, its counters and its single consumer.

Counters, all counted from the pipeline's start: ``produced`` (computed by the engine,
prefetch included) >= ``sent`` (written to the stream) >= ``acknowledged`` (the consumer
said it consumed them). A new stream starts where its consumer says it stands, so no batch
sent ahead is lost when a stream breaks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from conveyor.errors import (
    ConsumerBusy,
    ConveyorError,
    FailedPrecondition,
    Fenced,
    InvalidArgument,
)
from conveyor.v1 import service_pb2
from conveyor_server.pipeline import Pipeline


@dataclass
class HostedPipeline:
    name: str
    engine: Pipeline
    generation: int
    keep: int
    sent: int = 0
    acknowledged: int = 0
    streaming: bool = False
    #: Why this server may no longer serve the pipeline (fenced, deleted), if so.
    ended: str | None = None
    ended_error: type[ConveyorError] = Fenced
    latest_checkpoint: str = ""
    #: The checkpoint written when this server drained the pipeline, if any.
    drain_checkpoint: str = ""
    #: Set by this server's own delete before it releases the name, so the fencing
    #: watcher does not take the released name for someone else's doing.
    deleting: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)

    def attach(self, start: int) -> None:
        """Become this pipeline's consumer, starting after ``start`` consumed batches."""
        with self.cond:
            self.check_live()
            if self.streaming:
                raise ConsumerBusy(f"pipeline {self.name!r} already has a consumer stream; "
                                   "a second consumer is refused (restore a copy under "
                                   "another name to read it twice)")
            lowest = self.engine.start_batches
            if start < lowest:
                raise FailedPrecondition(
                    f"pipeline {self.name!r}: cannot stream from batch {start}: this server "
                    f"holds it from batch {lowest} on")
            produced = self.engine.batches_produced
            if start > produced and produced != lowest:
                raise FailedPrecondition(
                    f"pipeline {self.name!r}: cannot stream from batch {start}: only "
                    f"{produced} were produced")
            # A consumer ahead of a freshly restored pipeline (one that kept consuming what
            # a draining server had sent after its checkpoint) starts after what it has:
            # the engine jumps there in O(1).
            if start != self.engine.batches_returned:
                try:
                    self.engine.seek(start)
                except (ValueError, OverflowError):
                    raise InvalidArgument(f"pipeline {self.name!r}: batch {start} is out of "
                                          "range") from None
            self.sent = self.acknowledged = start
            self.streaming = True

    def detach(self) -> None:
        with self.cond:
            self.streaming = False
            self.cond.notify_all()

    def acknowledge(self, consumed: int) -> None:
        with self.cond:
            # Clamped to the batches taken from the engine, not to ``sent``: an ack may
            # overtake the bookkeeping of the batch it acknowledges.
            if consumed > self.acknowledged:
                self.acknowledged = min(consumed, self.engine.batches_returned)
                self.cond.notify_all()

    def check_live(self) -> None:
        if self.ended is not None:
            raise self.ended_error(self.ended)

    def end(self, reason: str, error: type[ConveyorError] = Fenced) -> bool:
        """End the pipeline here for ``reason``; True if this call ended it."""
        with self.cond:
            first = self.ended is None
            if first:
                self.ended, self.ended_error = reason, error
            self.cond.notify_all()
        return first

    def wait_acknowledged(self, timeout: float) -> None:
        """Wait until the consumer acknowledged every batch sent (or ``timeout``)."""
        with self.cond:
            self.cond.wait_for(lambda: self.acknowledged >= self.sent, timeout)

    def info(self, holder: str, include_spec: bool = True) -> service_pb2.PipelineInfo:
        info = service_pb2.PipelineInfo(
            name=self.name, holder=holder, generation=self.generation,
            fingerprint=self.engine.fingerprint.hex(), produced=self.engine.batches_produced,
            sent=self.sent, acknowledged=self.acknowledged, streaming=self.streaming,
            latest_checkpoint=self.latest_checkpoint)
        if include_spec:
            info.spec.CopyFrom(self.engine.spec)
        info.epoch_sizes.update(self.engine.epoch_sizes())
        return info
