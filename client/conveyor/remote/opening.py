"""``Client.open``: one call for a trainer's first start and every start after.

A trainer names its pipeline and, optionally, its run. The first time, the name is free and
the pipeline is created for that run. Afterwards the name exists (on this server or
another, its server alive or dead), and what happens depends on the run, as in
Determined's two continuations:

- the same run (pause and reactivate, or a restart after a crash) goes on where the run
  stood: from its newest checkpoint (the trainer's own, a drain's, or the one written at
  creation), or after ``consumed`` batches when the trainer knows its own count (from the
  model checkpoint it restores). Its previous stream, if still open, is fenced.
- another run (continue a trial: same model, a fresh batch index) starts a fresh stream
  from batch 0 with the same spec; the old run's checkpoints are kept.

``run_id=None`` means "whichever run holds the name": the same-run case. A trainer that
says it consumed batches (``consumed`` > 0) of a run the name does not hold (a free name:
deleted, expired, another Redis) is refused (NOT_FOUND) rather than started again at batch
0, which would repeat its data.

With ``world_size`` > 1 the name is a data-parallel job's and ``rank`` one of its ranks
(below); a one-rank open goes on with the job of that name if there is one (a job resized
to one rank), else it is the plain pipeline described here.
A spec other than the pipeline's is refused (SPEC_MISMATCH) in both cases: a different
pipeline needs another name, or ``replace=True``, which deletes the old pipeline with its
checkpoints (a position of another spec is no place to resume the new one from) and
creates the new spec under the name, from batch 0.

A data-parallel job's rank (``open(name, spec, rank=r, world_size=N)``): a job reads ONE
global sequence, the one-rank pipeline's with the same spec: global batch ``j`` is that
pipeline's batch ``j``. At each step the N ranks take the next N global batches and rank
``r`` the r-th, so the ranks' batches of one step, concatenated in rank order, are the
one-rank pipeline's next N batches, byte for byte, epoch boundaries included. Each rank has a
pipeline of its own, ``<name>.rank-<r>``, on any server (held, leased and fenced as every
pipeline is); its batches are numbered by step.

``checkpoint()`` on every rank at the same step makes that step the job's cut in Redis.
``open`` then goes on from the cut (or from ``consumed``, the trainer's own step) with any
world size: the global position of a step does not depend on the world size that reaches it,
so every sample of an epoch is delivered exactly once across a resize. A world of another
size (or another run, or an earlier step) starts a new generation of the job: the older
ranks' streams are fenced and their checkpoints no longer count. ``run_id`` works as for one
pipeline: the same run goes on, another starts afresh from step 0.
"""

from __future__ import annotations

import contextlib

from conveyor import errors
from conveyor.definition import spec as specs
from conveyor.remote import calls
from conveyor.remote.cluster import Cluster
from conveyor.remote.pipeline import RemotePipeline
from conveyor.v1 import pipeline_pb2, service_pb2


def open_pipeline(client: Cluster, name: str, spec: pipeline_pb2.PipelineSpec, *,
                  run_id: str | None, consumed: int | None,
                  keep_checkpoints: int, rank: int = 0, world_size: int = 1,
                  replace: bool = False) -> RemotePipeline:
    check_share(rank, world_size)
    try:
        start = join(client, name, spec, run_id=run_id, world_size=world_size,
                     consumed=consumed, existing_only=world_size == 1)
    except errors.NotFound:
        pass  # no job of that name: one rank is a plain pipeline
    except errors.ConveyorError as exc:
        if world_size > 1 or getattr(exc, "code", "") != "UNIMPLEMENTED":
            raise  # (a server from before jobs has none: one rank is a plain pipeline)
    else:
        return open_rank(client, name, spec, start, rank=rank,
                         keep_checkpoints=keep_checkpoints)
    info = None
    if spec.enable_checkpointing:
        # A name whose server died exists until it is taken, also once its lease ran out
        # (when a plain create could claim it): only a free name is created. (Without
        # checkpoints there is no position to go on from: created anew when it can be.)
        with contextlib.suppress(errors.NotFound):
            info = calls.describe(client, name)
    if info is None:
        _no_position_to_drop(name, run_id, consumed, "the name is free")
        try:
            return _create(client, name, spec, keep_checkpoints=keep_checkpoints,
                           run_id=run_id or "")
        except errors.AlreadyExists:  # opened before: the same run goes on, another
            info = calls.describe(client, name)  # starts afresh
    # A seed drawn by this definition (none was given, as DALI's default) is not the user's
    # choice: the pipeline goes on with the seed it drew first, as a restore does.
    compared = specs.with_checkpoint_seed(spec, info.spec) if info.HasField("spec") else spec
    wanted = specs.fingerprint(compared).hex()
    if info.fingerprint and info.fingerprint != wanted:
        if replace:
            _no_position_to_drop(name, run_id, consumed, "the name held another spec")
            free_name(client, name, info.holder, keep_checkpoints=False)
            return _create(client, name, spec, keep_checkpoints=keep_checkpoints,
                           run_id=run_id or "")
        raise errors.SpecMismatch(
            f"pipeline {name!r} exists with another spec (fingerprint "
            f"{info.fingerprint[:12]}..., this one {wanted[:12]}...): a different pipeline "
            "needs another name, or open it with replace=True to replace the old one (it is "
            "deleted with its checkpoints; the new spec starts at batch 0)", pipeline=name)
    if run_id is None or run_id == info.run_id:
        return _go_on(client, name, info.run_id, consumed, keep_checkpoints)
    _no_position_to_drop(name, run_id, consumed, f"the name holds run {info.run_id!r}")
    free_name(client, name, info.holder)
    try:
        return _create(client, name, spec, keep_checkpoints=keep_checkpoints, run_id=run_id)
    except errors.AlreadyExists:
        # Another process of the new run opened it first: go on with it.
        return _go_on(client, name, run_id, consumed, keep_checkpoints)


def _go_on(client: Cluster, name: str, run_id: str, consumed: int | None,
           keep_checkpoints: int) -> RemotePipeline:
    """The run ``run_id`` resumed on the first server that answers, after ``consumed``
    batches or at its newest checkpoint."""
    found = [c for c in calls.list_checkpoints(client, name) if c.run_id == run_id]
    if consumed is None:
        if not found:
            raise errors.NotFound(
                f"pipeline {name!r} has no checkpoint of run {run_id!r} to resume from "
                "(was it built without enable_checkpointing?)", pipeline=name)
        consumed = max(found, key=_newest).batches
    return _resume(client, name, consumed, keep_checkpoints=keep_checkpoints,
                   checkpoints=found)


def _no_position_to_drop(name: str, run_id: str | None, consumed: int | None,
                         why: str) -> None:
    """Refuse to start ``run_id`` afresh at batch 0 when the trainer says it consumed
    batches of it already: its data would come again. (Its checkpoints are gone: the
    pipeline was deleted, they expired, or this is another Redis.)"""
    if consumed:
        raise errors.NotFound(
            f"pipeline {name!r}: the trainer consumed {consumed} batches of run "
            f"{run_id or '(unnamed)'!r}, but {why}: that run's position is not kept here, "
            "and starting it again at batch 0 would repeat its data; open without consumed= "
            "(or consumed=0) to start at batch 0", pipeline=name)


def _newest(c: service_pb2.CheckpointInfo) -> tuple[int, int]:
    return c.batches, c.created_unix_ms


def free_name(client: Cluster, name: str, holder: str, *,
              keep_checkpoints: bool = True) -> None:
    """Release ``name`` for a new run, keeping the old run's checkpoints (unless not
    ``keep_checkpoints``): on its holder, or on any server when the holder is gone (fencing
    it, were it only unreachable)."""
    request = service_pb2.DeletePipelineRequest(name=name, keep_checkpoints=keep_checkpoints)
    try:
        if holder:
            client.call("DeletePipeline", request, via=client.reach(holder))
            return
    except (errors.Unavailable, errors.NotFound):
        pass
    request.force = True
    with contextlib.suppress(errors.NotFound):  # deleted meanwhile
        client.call("DeletePipeline", request)


# -- a data-parallel job's ranks -----------------------------------------------------------


def rank_name(job: str, rank: int) -> str:
    """The pipeline of rank ``rank`` of the job ``job``."""
    return f"{job}.rank-{rank}"


def join(client: Cluster, name: str, spec: pipeline_pb2.PipelineSpec, *, run_id: str | None,
         world_size: int, consumed: int | None,
         existing_only: bool = False) -> service_pb2.JoinJobResponse:
    """Join the job ``name`` with ``world_size`` ranks: where every rank starts."""
    request = service_pb2.JoinJobRequest(job=name, world_size=world_size,
                                         fingerprint=specs.fingerprint(spec).hex(),
                                         existing_only=existing_only)
    if run_id is not None:
        request.run_id = run_id
    if consumed is not None:
        request.step = consumed
    reply: service_pb2.JoinJobResponse = client.call("JoinJob", request)
    return reply


def open_rank(client: Cluster, name: str, spec: pipeline_pb2.PipelineSpec,
              start: service_pb2.JoinJobResponse, *, rank: int,
              keep_checkpoints: int) -> RemotePipeline:
    """Rank ``rank``'s pipeline, at the start ``join`` answered: restored from the job's
    checkpoint at or before it (the stages jump to the start), else created there (the
    same position: every stage's state is a function of the global position)."""
    share = service_pb2.JobShare(job=name, rank=rank, world_size=start.world_size,
                                 generation=start.generation, step=start.step,
                                 global_batches=start.global_batches)
    pipeline = rank_name(name, rank)
    if start.checkpoint_id:
        try:
            return _restore(client, pipeline, start.checkpoint_id, spec=spec,
                            keep_checkpoints=keep_checkpoints, run_id=start.run_id, job=share)
        except errors.NotFound:
            pass  # retired by its pipeline's retention since: start from the spec there
    try:
        return _create(client, pipeline, spec, keep_checkpoints=keep_checkpoints,
                       run_id=start.run_id, job=share)
    except errors.AlreadyExists as exc:
        free_name(client, pipeline, exc.metadata.get("holder", ""))
    return _create(client, pipeline, spec, keep_checkpoints=keep_checkpoints,
                   run_id=start.run_id, job=share)


def check_share(rank: int, world_size: int) -> None:
    if world_size < 1:
        raise errors.InvalidArgument(f"world_size: got {world_size}, expected at least 1")
    if not 0 <= rank < world_size:
        raise errors.InvalidArgument(f"rank: got {rank}, expected 0..{world_size - 1} "
                                     f"(world_size {world_size})")


# -- the remote pipelines of the calls above ------------------------------------------------


def _create(client: Cluster, name: str, spec: pipeline_pb2.PipelineSpec, *,
            keep_checkpoints: int, run_id: str,
            job: service_pb2.JobShare | None = None) -> RemotePipeline:
    info, holder = calls.create(client, name, spec, keep_checkpoints=keep_checkpoints,
                                run_id=run_id, job=job)
    return RemotePipeline(client, info, via=holder)


def _restore(client: Cluster, name: str, checkpoint_id: str, *,
             spec: pipeline_pb2.PipelineSpec, keep_checkpoints: int, run_id: str,
             job: service_pb2.JobShare) -> RemotePipeline:
    info, via = calls.restore(client, name, checkpoint_id, spec=spec,
                              keep_checkpoints=keep_checkpoints, run_id=run_id, job=job)
    return RemotePipeline(client, info, via=via)


def _resume(client: Cluster, name: str, consumed: int, *, keep_checkpoints: int,
            checkpoints: list[service_pb2.CheckpointInfo]) -> RemotePipeline:
    info, via = calls.resume(client, name, consumed, keep_checkpoints=keep_checkpoints,
                             checkpoints=checkpoints)
    return RemotePipeline(client, info, consumed=consumed, via=via)
