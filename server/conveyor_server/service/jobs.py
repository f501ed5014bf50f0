"""Data-parallel jobs on the service side: ``JoinJob``, the ranks' shares, and the marks
that make the ranks' checkpoints a job's cut.

A job of N ranks is N pipelines, ``<job>.rank-<r>``, each held (leased, fenced) as any
pipeline is, so each rank may use another server. The job record in Redis
(``store/jobs.py``) says which world and generation the ranks belong to and where they
start; a rank's pipeline carries its ``Share`` (``engine/stages/job_share.py``). A rank's
checkpoint is marked in the record after it is stored: when every rank of the world has
marked a step, that step is the job's cut. ``JoinJob`` with another world size (or run,
or an earlier step) starts a new generation: the older ranks' marks are refused, and the
ranks beyond the new world are released (their holders fenced).
"""

from __future__ import annotations

import logging

from conveyor.errors import Fenced, InvalidArgument, NotFound
from conveyor.v1 import checkpoint_pb2, service_pb2
from conveyor_server.engine.stages.job_share import Share
from conveyor_server.store.ids import check_name
from conveyor_server.store.jobs import JobRecords
from conveyor_server.store.store import Store

log = logging.getLogger("conveyor.server")


def rank_name(job: str, rank: int) -> str:
    """The pipeline of rank ``rank`` of ``job``."""
    return f"{job}.rank-{rank}"


def share_of(name: str, message: service_pb2.JobShare) -> Share:
    """The engine's share from a request's, for the pipeline ``name``."""
    check_name(message.job)
    if message.world_size < 1:
        raise InvalidArgument(f"job {message.job!r}: job.world_size must be at least 1")
    share = Share(message.job, message.rank, message.world_size, message.generation,
                  message.step, message.global_batches)
    if name != rank_name(share.job, share.rank):
        raise InvalidArgument(f"pipeline {name!r}: rank {share.rank} of job {share.job!r} is "
                              f"named {rank_name(share.job, share.rank)!r}")
    return share


def share_message(share: Share) -> service_pb2.JobShare:
    return service_pb2.JobShare(job=share.job, rank=share.rank, world_size=share.world_size,
                                generation=share.generation, step=share.step,
                                global_batches=share.global_batches)


class Jobs:
    def __init__(self, store: Store, instance: str) -> None:
        self.records = JobRecords(store)
        self._store = store
        self._instance = instance

    def join(self, request: service_pb2.JoinJobRequest,
             creator: str) -> service_pb2.JoinJobResponse:
        job = check_name(request.job)
        if request.world_size < 1:
            raise InvalidArgument("JoinJob: world_size must be at least 1")
        check_name(rank_name(job, request.world_size - 1))
        start = self.records.join(
            job, request.world_size, request.run_id if request.HasField("run_id") else None,
            request.fingerprint, request.step if request.HasField("step") else None, creator,
            request.existing_only)
        if start.previous_world_size > start.world_size:
            self._release_ranks(job, range(start.world_size, start.previous_world_size))
        if start.previous_world_size:
            log.info("job %s goes on with %d ranks from step %d (global batch %d), "
                     "generation %d", job, start.world_size, start.step, start.global_batches,
                     start.generation, extra={"pipeline": job, "generation": start.generation})
        return service_pb2.JoinJobResponse(
            generation=start.generation, run_id=start.run_id, world_size=start.world_size,
            step=start.step, global_batches=start.global_batches,
            checkpoint_id=start.checkpoint_id, cut_step=start.cut_step,
            cut_global_batches=start.cut_global_batches)

    def _release_ranks(self, job: str, ranks: range) -> None:
        """Release the pipelines of ranks the job no longer has (their holders, if alive,
        are fenced); their checkpoints are kept."""
        for rank in ranks:
            name = rank_name(job, rank)
            try:
                self._store.release(name, self._instance, True, force=True)
            except NotFound:
                continue
            log.info("released %s: job %s has fewer ranks now", name, job,
                     extra={"pipeline": name})

    def check_current(self, position: checkpoint_pb2.JobPosition) -> None:
        """Fenced unless the job is still at the checkpoint's generation (a rank's own
        checkpoint restored on failover must not take a newer world's rank over)."""
        now = self.records.generation(position.job)
        if now is not None and now != position.generation:
            raise Fenced(f"job {position.job!r} went on without this rank's world: it is at "
                         f"generation {now}, the checkpoint at {position.generation}; join the"
                         " job again (Client.open) to resume it")

    def mark(self, share: Share, step: int, checkpoint_id: str) -> None:
        cut = self.records.mark(share.job, share.generation, share.rank, step,
                                share.cut(step), checkpoint_id)
        if cut is not None:
            log.info("job %s: every rank checkpointed step %d (global batch %d)", share.job,
                     cut, share.cut(cut), extra={"pipeline": share.job, "batches": cut})
