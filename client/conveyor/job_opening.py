"""``Client.open`` for a data-parallel job's rank: ``open(name, spec, rank=r,
world_size=N)``.

A job reads ONE global sequence, the one-rank pipeline's with the same spec: global batch
``j`` is that pipeline's batch ``j``. At each step the N ranks take the next N global
batches and rank ``r`` the r-th, so the ranks' batches of one step, concatenated in rank
order, are the one-rank pipeline's next N batches, byte for byte, epoch boundaries
included. Each rank has a pipeline of its own, ``<name>.rank-<r>``, on any server (held,
leased and fenced as every pipeline is); its batches are numbered by step.

``checkpoint()`` on every rank at the same step makes that step the job's cut in Redis.
``open`` then goes on from the cut (or from ``consumed``, the trainer's own step) with any
world size: the global position of a step does not depend on the world size that reaches
it, so every sample of an epoch is delivered exactly once across a resize. A world of
another size (or another run, or an earlier step) starts a new generation of the job: the
older ranks' streams are fenced and their checkpoints no longer count. ``run_id`` works as
for one pipeline: the same run goes on, another starts afresh from step 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor import errors, opening
from conveyor import spec as specs
from conveyor.v1 import pipeline_pb2, service_pb2

if TYPE_CHECKING:
    from conveyor.client import Client
    from conveyor.remote import RemotePipeline


def rank_name(job: str, rank: int) -> str:
    """The pipeline of rank ``rank`` of the job ``job``."""
    return f"{job}.rank-{rank}"


def join(client: Client, name: str, spec: pipeline_pb2.PipelineSpec, *, run_id: str | None,
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
    reply: service_pb2.JoinJobResponse = client._call("JoinJob", request)
    return reply


def open_rank(client: Client, name: str, spec: pipeline_pb2.PipelineSpec,
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
            return client.restore(pipeline, start.checkpoint_id, spec=spec,
                                  keep_checkpoints=keep_checkpoints, run_id=start.run_id,
                                  job=share)
        except errors.NotFound:
            pass  # retired by its pipeline's retention since: start from the spec there
    try:
        return client.create(pipeline, spec, keep_checkpoints=keep_checkpoints,
                             run_id=start.run_id, job=share)
    except errors.AlreadyExists as exc:
        opening.free_name(client, pipeline, exc.metadata.get("holder", ""))
    return client.create(pipeline, spec, keep_checkpoints=keep_checkpoints,
                         run_id=start.run_id, job=share)


def check_share(rank: int, world_size: int) -> None:
    if world_size < 1:
        raise errors.InvalidArgument(f"world_size: got {world_size}, expected at least 1")
    if not 0 <= rank < world_size:
        raise errors.InvalidArgument(f"rank: got {rank}, expected 0..{world_size - 1} "
                                     f"(world_size {world_size})")
