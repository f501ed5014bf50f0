"""The pipeline and checkpoint calls over a cluster, and the ``Checkpoint`` they return.

Each function makes one call (``resume``: a listing, then a restore) and returns what the
server answered: a pipeline's description and the server holding it, a checkpoint, a
listing. The remote pipeline, ``Client.open`` and the ``Client`` facade wrap them;
``Client``'s methods of the same names describe the arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conveyor import errors
from conveyor.remote.cluster import Cluster
from conveyor.v1 import pipeline_pb2, service_pb2


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint stored in Redis: its cluster-wide id and the self-contained blob."""

    id: str
    data: bytes
    pipeline: str
    batches: int
    created_unix_ms: int
    server: str
    #: The run the pipeline belonged to ("" if none was named).
    run_id: str = ""


def checkpoint_of(info: service_pb2.CheckpointInfo, data: bytes) -> Checkpoint:
    return Checkpoint(info.id, data, info.pipeline, info.batches, info.created_unix_ms,
                      info.server, info.run_id)


#: A pipeline's description and the address of the server that holds it.
Held = tuple[service_pb2.PipelineInfo, str]


def create(cluster: Cluster, name: str, spec: pipeline_pb2.PipelineSpec, *,
           keep_checkpoints: int = 0, run_id: str = "",
           job: service_pb2.JobShare | None = None) -> Held:
    """Create ``name`` on the server placement chooses."""
    reply, holder = cluster.placed("CreatePipeline", service_pb2.CreatePipelineRequest(
        name=name, spec=spec, keep_checkpoints=keep_checkpoints, run_id=run_id, job=job))
    return reply.pipeline, holder


def restore(cluster: Cluster, name: str, checkpoint: str | Checkpoint | bytes, *,
            spec: pipeline_pb2.PipelineSpec | None = None, keep_checkpoints: int = 0,
            consumed: int | None = None, via: str | None = None,
            run_id: str | None = None, job: service_pb2.JobShare | None = None) -> Held:
    """Host ``name`` from ``checkpoint``, ``via`` that server or one placement chooses."""
    request = service_pb2.RestoreRequest(name=name, keep_checkpoints=keep_checkpoints)
    if isinstance(checkpoint, Checkpoint):
        request.checkpoint_id = checkpoint.id
    elif isinstance(checkpoint, str):
        request.checkpoint_id = checkpoint
    else:
        request.data = bytes(checkpoint)
    if spec is not None:
        request.spec.CopyFrom(spec)
    if consumed is not None:
        request.consumed = consumed  # checked by the server before it takes the name
    if run_id is not None:
        request.run_id = run_id
    if job is not None:
        request.job.CopyFrom(job)
    if via is None:
        reply, via = cluster.placed("Restore", request)
    else:
        reply = cluster.call("Restore", request, via=via)
    return reply.pipeline, via


def resume(cluster: Cluster, name: str, consumed: int, *,
           spec: pipeline_pb2.PipelineSpec | None = None, keep_checkpoints: int = 0,
           via: str | None = None,
           checkpoints: Sequence[service_pb2.CheckpointInfo] | None = None,
           run_id: str | None = None) -> Held:
    """Host ``name`` at the trainer's position, ``consumed`` batches: restored from its
    newest checkpoint at or before it (of ``checkpoints``, by default all of its own)."""
    found = checkpoints if checkpoints is not None else list_checkpoints(cluster, name, via)
    usable = [c for c in found if c.batches <= consumed]
    if not usable:
        raise errors.NotFound(f"pipeline {name!r} has no checkpoint at or before batch "
                              f"{consumed}")
    best = max(usable, key=lambda c: (c.batches, c.created_unix_ms))
    return restore(cluster, name, best.id, spec=spec, keep_checkpoints=keep_checkpoints,
                   consumed=consumed, via=via, run_id=run_id)


def describe(cluster: Cluster, name: str, *,
             via: str | None = None) -> service_pb2.PipelineInfo:
    reply = cluster.call("DescribePipeline", service_pb2.DescribePipelineRequest(name=name),
                         via=via)
    info: service_pb2.PipelineInfo = reply.pipeline
    return info


def list_checkpoints(cluster: Cluster, name: str,
                     via: str | None = None) -> list[service_pb2.CheckpointInfo]:
    """The checkpoints of ``name`` (asked of the server ``via``, if given)."""
    return list(cluster.call("ListCheckpoints", service_pb2.ListCheckpointsRequest(name=name),
                             via=via).checkpoints)


def checkpoint(cluster: Cluster, name: str, consumed: int | None = None, *,
               via: str | None = None, past_epoch_end: bool = False) -> Checkpoint:
    """Checkpoint ``name`` after ``consumed`` batches (None: the acknowledged ones)."""
    request = service_pb2.CheckpointRequest(name=name, past_epoch_end=past_epoch_end)
    if consumed is not None:
        request.consumed = consumed
    reply = cluster.call("Checkpoint", request, via=via)
    return checkpoint_of(reply.checkpoint, reply.data)


def tell_position(cluster: Cluster, name: str, consumed: int, *, via: str) -> bytes:
    """Tell the holder ``via`` that the trainer consumed ``consumed`` batches of ``name``;
    the pipeline's state there, recorded nowhere."""
    reply = cluster.call("Checkpoint", service_pb2.CheckpointRequest(
        name=name, consumed=consumed, position_only=True), via=via)
    return bytes(reply.data)


def delete(cluster: Cluster, name: str, *, keep_checkpoints: bool = False,
           force: bool = False, via: str | None = None) -> None:
    """Delete ``name`` ``via`` that server (by default the first that answers)."""
    cluster.call("DeletePipeline", service_pb2.DeletePipelineRequest(
        name=name, keep_checkpoints=keep_checkpoints, force=force), via=via)
