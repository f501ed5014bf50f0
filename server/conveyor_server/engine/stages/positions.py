"""Where a pipeline's source stages stand: placed at its start, computed at any later step.

At the start the stages go to the checkpoint's states (or the beginning), then, in O(1),
to the global position of the pipeline's share (``job_share.py``). Their states there are
kept: every later state is computed from them by the stages' ``advanced`` (a pure
function), never by replay. So the pipeline checkpoints any position it produced without
keeping snapshots, seeks in O(1), and a job's rank jumps to its next global batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.errors import CorruptCheckpoint, FailedPrecondition, InvalidArgument
from conveyor.v1 import checkpoint_pb2
from conveyor_server.engine.stages import MAX_SAMPLES, SourceStage
from conveyor_server.engine.stages.job_share import Share, share_of


def place_stages(stages: Sequence[SourceStage], body: checkpoint_pb2.CheckpointBody | None,
                 share: Share | None, batch_size: int) -> Share:
    """Put ``stages`` where the pipeline starts: at the checkpoint's states (or the
    beginning), then, in O(1), at the global position of ``share`` (by default the
    checkpoint's own share, or a plain pipeline's). The share the pipeline runs."""
    if body is not None:
        states = {s.op: s for s in body.op_states}
        for stage in stages:
            if stage.op_index not in states:
                raise CorruptCheckpoint(f"checkpoint has no state for op {stage.op_index}")
            stage.reset(states[stage.op_index])
        share, at = share_of(body, share)
    else:
        for stage in stages:
            stage.reset(None)
        share, at = share or Share(), 0
    if share.global_batches < at:
        raise InvalidArgument(f"job {share.job!r}: the start, global batch "
                              f"{share.global_batches}, is before the checkpoint's ({at})")
    if share.global_batches * batch_size > MAX_SAMPLES:
        raise InvalidArgument(f"global batch {share.global_batches} is beyond the "
                              f"furthest a pipeline reaches ({MAX_SAMPLES} samples)")
    if share.global_batches > at:  # the stages jump to the start in O(1)
        for stage in stages:
            stage.reset(stage.advanced(stage.get_state(),
                                       (share.global_batches - at) * batch_size))
    return share


class StagePositions:
    """A pipeline's stages (in the plan's order) and their states at any of its steps,
    from those at its start (where ``place_stages`` put them)."""

    def __init__(self, stages: Sequence[SourceStage], share: Share, batch_size: int) -> None:
        self.stages = list(stages)
        self.share = share
        self._batch_size = batch_size
        #: The step the pipeline started at.
        self.start = share.step
        # The stages' states at the start's cut: every later state is computed from them.
        self._start_states = [stage.get_state() for stage in self.stages]

    @classmethod
    def placed(cls, stages: Sequence[SourceStage], body: checkpoint_pb2.CheckpointBody | None,
               share: Share | None, batch_size: int) -> StagePositions:
        """``stages`` put where the pipeline starts (see ``place_stages``)."""
        return cls(stages, place_stages(stages, body, share, batch_size), batch_size)

    def states_at(self, batches: int) -> list[checkpoint_pb2.OpState]:
        """Every stage's state before the pipeline's batch ``batches`` (after ``batches``
        batches, unless it is a job's rank), computed without replay."""
        return self._states_at_global(batches, self.share.block(batches))

    def cut_states(self, batches: int) -> list[checkpoint_pb2.OpState]:
        """Every stage's state at the job's cut before step ``batches`` (for a pipeline that
        is no job's rank, ``states_at``): what a checkpoint records."""
        return self._states_at_global(batches, self.share.cut(batches))

    def reset(self, states: Sequence[checkpoint_pb2.OpState]) -> None:
        """Put the stages at ``states`` (``states_at``'s)."""
        for stage, state in zip(self.stages, states, strict=True):
            stage.reset(state)

    def _states_at_global(self, batches: int, block: int) -> list[checkpoint_pb2.OpState]:
        if batches < self.start:
            raise FailedPrecondition(f"batch {batches} is before this pipeline's start "
                                     f"({self.start})")
        if block * self._batch_size > MAX_SAMPLES:
            raise InvalidArgument(f"batch {batches} is beyond the furthest position a "
                                  f"pipeline reaches ({MAX_SAMPLES} samples)")
        samples = (block - self.share.global_batches) * self._batch_size
        return [stage.advanced(state, samples)
                for stage, state in zip(self.stages, self._start_states, strict=True)]
