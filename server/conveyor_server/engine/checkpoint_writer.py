"""A pipeline's checkpoints: what one records at a position, sealed as a blob.

A checkpoint records the state after the batches *returned* (or, for the service, any
count up to those produced): the stages' states at that position are computed from their
states at the pipeline's start, in O(1), never by replay (``stages/positions.py``).

Deterministic serialization writes fields in number order and the position's fields come
last (``op_states``, ``batches``, ``job``), so the constant part (format version, spec,
fingerprint, file lists, engine id) is serialized once and each position's appended: the
same bytes as serializing the whole body, for less work per checkpoint (a service
checkpoints on every trainer's call). The blob's format and the checks of a restore are
``identity/checkpoint.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor.errors import CheckpointingDisabled, FailedPrecondition
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine.batch_queue import BatchQueue
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.plan import Plan
from conveyor_server.engine.stages.external_source_epochs import EpochCrossings
from conveyor_server.engine.stages.positions import StagePositions


class CheckpointWriter:
    """The checkpoints of the pipeline of ``spec`` (its ``fingerprint``), whose ``plan``
    runs through ``queue`` from ``positions``; ``engine_id`` gives its identity."""

    def __init__(self, spec: pipeline_pb2.PipelineSpec, fingerprint: bytes, plan: Plan,
                 engine_id: Callable[[], checkpoint_pb2.EngineId], positions: StagePositions,
                 epochs: EpochCrossings, queue: BatchQueue) -> None:
        self._spec = spec
        self._fingerprint = fingerprint
        self._plan = plan
        self._engine_id = engine_id
        self._positions = positions
        self._epochs = epochs
        self._queue = queue
        self._constant: bytes | None = None

    def body(self, batches: int | None = None) -> checkpoint_pb2.CheckpointBody:
        """The body of the checkpoint after ``batches`` batches (by default, those
        returned)."""
        body = self._constant_body()
        body.MergeFrom(self._position_body(batches, past_epoch_end=False))
        return body

    def blob(self, batches: int | None = None, *, past_epoch_end: bool = False) -> bytes:
        """The sealed checkpoint after ``batches`` batches (by default, those returned).
        ``past_epoch_end``: external sources at an epoch's end whose StopIteration was met
        stand at the next epoch's start (``stages/external_source_epochs.py``)."""
        position = self._position_body(batches, past_epoch_end=past_epoch_end
                                       ).SerializeToString(deterministic=True)
        if self._constant is None:
            self._constant = self._constant_body().SerializeToString(deterministic=True)
        return ckpt.seal_payload(self._constant + position)

    def _constant_body(self) -> checkpoint_pb2.CheckpointBody:
        """What every checkpoint of this pipeline holds (fields 1 to 5)."""
        return checkpoint_pb2.CheckpointBody(
            format_version=ckpt.FORMAT_VERSION,
            spec=self._spec,
            fingerprint=self._fingerprint,
            file_lists=[r.digest for r in self._plan.readers.values()],
            engine=self._engine_id(),
        )

    def _position_body(self, batches: int | None, *,
                       past_epoch_end: bool) -> checkpoint_pb2.CheckpointBody:
        """What depends on the position (fields 6 to 8, the last ones)."""
        if not self._spec.enable_checkpointing:
            raise CheckpointingDisabled(
                "checkpointing is disabled for this pipeline: build it with "
                "enable_checkpointing=True")
        n = self._queue.returned if batches is None else batches
        if n > self._queue.produced:
            raise FailedPrecondition(f"cannot checkpoint after {n} batches: only "
                                     f"{self._queue.produced} were produced")
        states = self._positions.cut_states(n)
        if past_epoch_end:
            states = self._epochs.past_end(states)
        body = checkpoint_pb2.CheckpointBody(op_states=states, batches=n)
        share = self._positions.share
        if share.job:
            body.job.CopyFrom(share.job_position(n))
        return body
