"""Data-parallel jobs in Redis: the job record, its ranks' checkpoint marks and its cuts.

Keys of one job share the hash tag ``{job}``, so the two scripts stay atomic on a Cluster:

    conveyor:job:{job}                 hash: world, run_id, fingerprint, creator,
                                       generation, start_step, start_global (the
                                       generation's start), cut_step, cut_global (the
                                       latest step every rank of a world checkpointed)
    conveyor:job:{job}:pending         sorted set of the mark keys of steps not complete
    conveyor:job:{job}:marks:<g>:<s>   hash: rank -> checkpoint id, for step s of generation g
    conveyor:job:{job}:cuts            sorted set, by global batches, of complete steps'
                                       checkpoints ("<global>:<step>:<id>"; newest kept)

A rank's checkpoint is stored under its own pipeline's name (with that name's fencing),
then marked here (``mark``): the mark is what makes it part of a cut, so a rank that
died between the two only leaves the job at its previous cut. ``join`` (``JoinJob``)
creates or goes on with the record; see ``scripts/join_job.lua``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conveyor.errors import (
    FailedPrecondition,
    Fenced,
    NotFound,
    PermissionDenied,
    SpecMismatch,
)
from conveyor_server.store.store import Store, lua_script

#: Complete steps whose checkpoints are kept as starting points of later resumes.
CUTS_KEPT = 16


def _job_key(job: str, suffix: str = "") -> str:
    return f"conveyor:job:{{{job}}}{suffix}"


@dataclass(frozen=True)
class JobStart:
    """Where every rank of a job starts, as ``JoinJob`` answers it."""

    generation: int
    run_id: str
    world_size: int
    step: int
    global_batches: int
    #: A checkpoint of the job at or before the start ("": none).
    checkpoint_id: str
    cut_step: int
    cut_global_batches: int
    #: The world size before this join started a new generation (0: none was started).
    previous_world_size: int


class JobRecords:
    def __init__(self, store: Store) -> None:
        self._store = store
        redis: Any = store._redis
        self._redis = redis
        self._join = redis.register_script(lua_script("join_job"))
        self._mark = redis.register_script(lua_script("mark_job_step"))

    def _keys(self, job: str) -> list[str]:
        return [_job_key(job), _job_key(job, ":pending"), _job_key(job, ":cuts")]

    def join(self, job: str, world_size: int, run_id: str | None, fingerprint: str,
             step: int | None, creator: str, existing_only: bool = False) -> JobStart:
        args = [world_size, int(run_id is not None), run_id or "", fingerprint,
                int(step is not None), step or 0, creator, int(existing_only)]
        reply = self._store._call("join the job", lambda: self._join(
            keys=self._keys(job), args=args))
        code = int(reply[0])
        if code == -1:
            raise SpecMismatch(f"job {job!r} runs another spec (fingerprint "
                               f"{reply[1].decode()[:12]}..., this one {fingerprint[:12]}...):"
                               " a different pipeline needs another name", pipeline=job)
        if code == -2:
            raise FailedPrecondition(
                f"job {job!r}: step {step} is before its current world's start (step "
                f"{int(reply[1])}): its global position is not known")
        if code == -4:
            raise NotFound(f"job {job!r} does not exist")
        if code == -3:
            raise PermissionDenied(f"job {job!r} belongs to another identity")
        return JobStart(code, reply[1].decode(), int(reply[2]), int(reply[3]), int(reply[4]),
                        reply[5].decode(), int(reply[6]), int(reply[7]), int(reply[8]))

    def mark(self, job: str, generation: int, rank: int, step: int, global_batches: int,
             checkpoint_id: str) -> int | None:
        """Record rank ``rank``'s checkpoint at ``step``; the job's cut step if this
        completed it, else None. Fenced if the job went on in a newer generation."""
        args = [generation, rank, step, global_batches, checkpoint_id,
                _job_key(job, ":marks:"), CUTS_KEPT]
        reply = self._store._call("mark the job's step", lambda: self._mark(
            keys=self._keys(job), args=args))
        if int(reply[0]) == 0:
            raise Fenced(f"job {job!r} went on without this rank: it is at generation "
                         f"{int(reply[1])} with {int(reply[2])} ranks (this rank belongs to "
                         f"generation {generation}); its checkpoints no longer count")
        cut = int(reply[1])
        return cut if cut >= 0 else None

    def generation(self, job: str) -> int | None:
        """The job's current generation (None: no such job)."""
        value = self._store._call("read the job", lambda: self._redis.hget(
            _job_key(job), "generation"))
        return int(value) if value is not None else None
