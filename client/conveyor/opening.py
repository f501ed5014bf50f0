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
(``job_opening.py``); a one-rank open goes on with the job of that name if there is one
(a job resized to one rank), else it is the plain pipeline described here.
A spec other than the pipeline's is refused (SPEC_MISMATCH) in both cases: a different
pipeline needs another name.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from conveyor import errors
from conveyor import spec as specs
from conveyor.job_opening import check_share, join, open_rank
from conveyor.v1 import pipeline_pb2, service_pb2

if TYPE_CHECKING:
    from conveyor.client import Client
    from conveyor.remote import RemotePipeline


def open_pipeline(client: Client, name: str, spec: pipeline_pb2.PipelineSpec, *,
                  run_id: str | None, consumed: int | None,
                  keep_checkpoints: int, rank: int = 0, world_size: int = 1) -> RemotePipeline:
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
            info = client.pipeline(name)
    if info is None:
        _no_position_to_drop(name, run_id, consumed, "the name is free")
        try:
            return client.create(name, spec, keep_checkpoints=keep_checkpoints,
                                 run_id=run_id or "")
        except errors.AlreadyExists:  # opened before: the same run goes on, another
            info = client.pipeline(name)  # starts afresh
    wanted = specs.fingerprint(spec).hex()
    if info.fingerprint and info.fingerprint != wanted:
        raise errors.SpecMismatch(
            f"pipeline {name!r} exists with another spec (fingerprint "
            f"{info.fingerprint[:12]}..., this one {wanted[:12]}...): a different pipeline "
            "needs another name", pipeline=name)
    if run_id is None or run_id == info.run_id:
        return _go_on(client, name, info.run_id, consumed, keep_checkpoints)
    _no_position_to_drop(name, run_id, consumed, f"the name holds run {info.run_id!r}")
    free_name(client, name, info.holder)
    try:
        return client.create(name, spec, keep_checkpoints=keep_checkpoints, run_id=run_id)
    except errors.AlreadyExists:
        # Another process of the new run opened it first: go on with it.
        return _go_on(client, name, run_id, consumed, keep_checkpoints)


def _go_on(client: Client, name: str, run_id: str, consumed: int | None,
           keep_checkpoints: int) -> RemotePipeline:
    """The run ``run_id`` resumed on the first server that answers, after ``consumed``
    batches or at its newest checkpoint."""
    found = [c for c in client.checkpoints(name) if c.run_id == run_id]
    if consumed is None:
        if not found:
            raise errors.NotFound(
                f"pipeline {name!r} has no checkpoint of run {run_id!r} to resume from "
                "(was it built without enable_checkpointing?)", pipeline=name)
        consumed = max(found, key=_newest).batches
    return client.resume(name, consumed, keep_checkpoints=keep_checkpoints,
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


def free_name(client: Client, name: str, holder: str) -> None:
    """Release ``name`` for a new run, keeping the old run's checkpoints: on its holder,
    or on any server when the holder is gone (fencing it, were it only unreachable)."""
    request = service_pb2.DeletePipelineRequest(name=name, keep_checkpoints=True)
    try:
        if holder:
            client._call("DeletePipeline", request, via=holder)
            return
    except (errors.Unavailable, errors.NotFound):
        pass
    request.force = True
    with contextlib.suppress(errors.NotFound):  # deleted meanwhile
        client._call("DeletePipeline", request)
