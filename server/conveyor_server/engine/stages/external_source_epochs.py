"""An external source's epoch ends as a pipeline's batches meet them.

A source's ``StopIteration`` does not stop the stage (``external_source.py``): the batch
that met it is the next epoch's first, marked ``epoch_crossed`` when ``next()`` gives it.
The pipeline advances its stages for a batch when it submits the batch, ahead of the
consumer, so ``EpochCrossings`` notes which produced batches open an epoch and, as each
batch is returned, whether it is one (``started``): a function of the position, the same
for a pipeline restored there, never of timing. DALI's pipeline raises StopIteration
before such a batch until ``reset()``; ``conveyor.definition.pipeline.Pipeline`` does, from the
engine's ``epoch_started``; a remote pipeline does from each batch header's
``opens_source_epoch``, which a stream sets from it.

``past_end`` gives a checkpoint's states as DALI's once ``run()`` raised that
StopIteration: an external source at the end of the epoch that stopped stands at the next
epoch's start, so the restored pipeline does not raise it again.
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.v1 import checkpoint_pb2
from conveyor_server.engine.stages import SourceStage
from conveyor_server.engine.stages.external_source import ExternalSourceStage


class EpochCrossings:
    """Which of a pipeline's batches open an external source's epoch (its ``stages``, in
    the plan's order)."""

    def __init__(self, stages: Sequence[SourceStage]) -> None:
        self._stages = list(stages)
        self._sources = [s for s in self._stages if isinstance(s, ExternalSourceStage)]
        #: The produced batches (by index) not yet returned that open an epoch.
        self._opening: set[int] = set()
        #: Whether the batch last returned opens an epoch.
        self.started = False

    def produced(self, batch: int) -> None:
        """Note whether ``batch``, the one the stages' ``next()`` just gave, opens one."""
        if any(source.epoch_crossed for source in self._sources):
            self._opening.add(batch)

    def returned(self, batch: int) -> None:
        """``batch`` is returned: ``started`` says whether it opens an epoch."""
        self.started = batch in self._opening
        self._opening.discard(batch)

    def drop(self) -> None:
        """Forget the batches produced and not returned (a seek, a failed batch, close)."""
        self._opening.clear()

    def past_end(self, states: Sequence[checkpoint_pb2.OpState]) -> list[checkpoint_pb2.OpState]:
        """``states`` (the stages', in order), with each external source that stands at
        the end of an epoch whose StopIteration was met moved to the next epoch's start."""
        return [stage.past_epoch_end(state) if isinstance(stage, ExternalSourceStage)
                else state for stage, state in zip(self._stages, states, strict=True)]
