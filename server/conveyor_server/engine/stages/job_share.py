"""A pipeline's share of a data-parallel job: which global batches it produces.

A job of N ranks reads ONE global sequence: global batch ``j`` is batch ``j`` of the
one-rank pipeline with the same spec (its samples ``j*B .. j*B+B-1``, every reader order
and random draw keyed by those global indices). At each step the ranks take the next N
global batches, rank ``r`` the r-th. A rank's pipeline counts its own batches as steps;
``Share`` maps its step ``k`` to the global batch it produces there and to the job's cut
(the global batches before step ``k``), both pure functions of the start, so a pipeline
jumps to any step in O(1) and a job goes on with another world size from any cut.

A pipeline that is no job's rank is the share of one rank starting where it starts: step
``k`` is global batch ``k``. Where its stages stand at each step: ``positions.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.errors import CorruptCheckpoint, InvalidArgument
from conveyor.v1 import checkpoint_pb2

#: The most ranks a job has.
MAX_WORLD_SIZE = 65536


@dataclass(frozen=True)
class Share:
    #: The job's name ("" for a pipeline that is no job's rank).
    job: str = ""
    rank: int = 0
    world_size: int = 1
    #: The job's generation the rank belongs to (fencing of older worlds).
    generation: int = 0
    #: The step the pipeline starts at, and the global batches before it.
    step: int = 0
    global_batches: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.world_size <= MAX_WORLD_SIZE:
            raise InvalidArgument(f"job {self.job!r}: world_size {self.world_size} is not "
                                  f"in 1..{MAX_WORLD_SIZE}")
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgument(f"job {self.job!r}: rank {self.rank} is not in "
                                  f"0..{self.world_size - 1} (world_size {self.world_size})")

    @property
    def strided(self) -> bool:
        """Whether its batches are not consecutive global batches."""
        return self.world_size > 1 or self.rank > 0

    def block(self, step: int) -> int:
        """The global batch this pipeline produces as its batch ``step``."""
        return self.cut(step) + self.rank

    def cut(self, step: int) -> int:
        """The global batches before the job's step ``step``."""
        return self.global_batches + (step - self.step) * self.world_size

    def job_position(self, step: int) -> checkpoint_pb2.JobPosition:
        """What a checkpoint at the job's step ``step`` records of the job."""
        return checkpoint_pb2.JobPosition(job=self.job, rank=self.rank,
                                          world_size=self.world_size,
                                          generation=self.generation,
                                          global_batches=self.cut(step))


def share_of(body: checkpoint_pb2.CheckpointBody,
              share: Share | None) -> tuple[Share, int]:
    """The share a pipeline restored from ``body`` runs (``share``, else the checkpoint's
    own) and the global batches the checkpoint's states stand at."""
    if not body.HasField("job"):
        return share or Share(step=body.batches, global_batches=body.batches), body.batches
    job = body.job
    at = job.global_batches
    if share is None:
        if job.world_size < 1:
            raise CorruptCheckpoint(f"checkpoint of job {job.job!r} has world size 0")
        share = Share(job.job, job.rank, job.world_size, job.generation, body.batches, at)
    return share, at
