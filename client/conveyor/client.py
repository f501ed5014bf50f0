"""The Conveyor client: ``Client(addresses)`` and the ``RemotePipeline`` it hands out.

``Client`` is the facade over the remote side (``conveyor.remote``): the servers it knows
and their calls (``Cluster``, ``remote/cluster.py``), the pipeline and checkpoint calls
(``remote/calls.py``), the remote pipeline (``remote/pipeline.py``) and ``open``
(``remote/opening.py``). A new pipeline (``create``, ``open``, ``restore`` without ``via``)
is placed on a lightly loaded live server of the fleet (``remote/placement.py``); any
other call goes to the first that answers; a pipeline's stream and checkpoints go to the
server that holds it, and follow it when it moves. Server errors surface as the classes of
``conveyor.errors``, with the server's reason and metadata.
"""

from __future__ import annotations

from collections.abc import Sequence

from conveyor.definition.spec import Definition, as_spec
from conveyor.remote import calls
from conveyor.remote.calls import Checkpoint
from conveyor.remote.cluster import Cluster
from conveyor.remote.fan_in import check_workers
from conveyor.remote.opening import open_pipeline
from conveyor.remote.pipeline import RemotePipeline
from conveyor.v1 import service_pb2

__all__ = ["Checkpoint", "Client", "RemotePipeline"]


class Client(Cluster):
    """The servers of ``target`` and the pipelines on them: a ``Cluster`` (whose
    ``__init__`` describes the arguments) with the pipeline calls on top."""

    # -- pipelines -------------------------------------------------------------------

    def create(self, name: str, spec: Definition, *,
               keep_checkpoints: int = 0, run_id: str = "",
               job: service_pb2.JobShare | None = None,
               workers: int | str = 1) -> RemotePipeline:
        """Create ``name`` (ALREADY_EXISTS if it is held). ``run_id``: the training run
        that consumes it, recorded with it and its checkpoints (see ``open``). ``job``: a
        data-parallel job's rank, as ``open`` makes it. ``workers``: the servers that
        compute its batches (see ``open``)."""
        check_workers(workers)
        info, holder = calls.create(self, name, as_spec(spec), keep_checkpoints=keep_checkpoints,
                                    run_id=run_id, job=job)
        return RemotePipeline(self, info, via=holder).fan_out(workers)

    def open(self, name: str, spec: Definition, *, run_id: str | None = None,
             rank: int = 0, world_size: int = 1, consumed: int | None = None,
             keep_checkpoints: int = 0, workers: int | str = 1,
             replace: bool = False) -> RemotePipeline:
        """Create ``name``, or, if it exists (on any server, alive or dead), resume it:
        the same ``run_id`` (or None) goes on where the run stood, at its newest
        checkpoint or after ``consumed`` batches; another ``run_id`` starts a fresh stream
        from batch 0 with the same spec. See ``remote/opening.py``. ``replace``: where ``name``
        exists with another spec, delete it with its checkpoints and create this spec under
        the name (from batch 0), instead of SpecMismatch.

        ``rank`` / ``world_size``: this trainer's share of a data-parallel job named
        ``name``: rank r of N takes, at every step, the r-th of the next N batches of the
        one-rank sequence; a job goes on with any world size from the latest step all its
        ranks checkpointed (or from ``consumed``, the trainer's own step). See
        ``remote/opening.py``.

        ``workers``: how many servers compute the batches (fan-in, ``remote/fan_in.py``): 1 (the
        holder's stream), a count, or ``"auto"`` (every live server of the fleet with the
        holder's behaviour, joining as they come). The trainer receives the same batches,
        in the same order, whatever the count; the pipeline stays on its holder
        (``via``), and ``workers`` on the pipeline lists the servers computing now."""
        check_workers(workers)
        return open_pipeline(self, name, as_spec(spec), run_id=run_id, consumed=consumed,
                             keep_checkpoints=keep_checkpoints, rank=rank,
                             world_size=world_size, replace=replace).fan_out(workers)

    def restore(self, name: str, checkpoint: str | Checkpoint | bytes, *,
                spec: Definition | None = None,
                keep_checkpoints: int = 0, consumed: int | None = None,
                via: str | None = None, run_id: str | None = None,
                job: service_pb2.JobShare | None = None,
                workers: int | str = 1) -> RemotePipeline:
        """Host ``name`` on this server from ``checkpoint``. ``consumed``: the batches this
        trainer has really consumed, when that is past the checkpoint (a drain checkpoints
        at the acknowledged position; batches already sent may still have been consumed
        after it): the stream then starts after them, so none is received twice.
        ``via``: the server to host it on (by default one placed as ``create`` places).
        ``run_id``: the run it belongs to from now on (by default the checkpoint's).
        ``job``: a data-parallel job's rank starting at the share's step (``open``).
        ``workers``: the servers that compute its batches (see ``open``); a checkpoint
        taken with any count restores with any other."""
        check_workers(workers)
        info, via = calls.restore(self, name, checkpoint,
                                  spec=None if spec is None else as_spec(spec),
                                  keep_checkpoints=keep_checkpoints, consumed=consumed, via=via,
                                  run_id=run_id, job=job)
        # The trainer's own count rules: its first stream request names it again.
        return RemotePipeline(self, info, consumed=consumed, via=via).fan_out(workers)

    def resume(self, name: str, consumed: int, *,
               spec: Definition | None = None,
               keep_checkpoints: int = 0, via: str | None = None,
               checkpoints: Sequence[service_pb2.CheckpointInfo] | None = None,
               run_id: str | None = None, workers: int | str = 1) -> RemotePipeline:
        """Host ``name`` on this server at the trainer's own position, ``consumed`` batches:
        from its newest checkpoint at or before that position (a drain's, a trainer's), in
        one call, whether its server drained, died or still holds it (it is fenced).
        ``checkpoints``: the ones to choose from (by default all of the pipeline's).
        ``run_id``: the run it belongs to from now on (by default the checkpoint's).
        ``workers``: the servers that compute its batches (see ``open``)."""
        check_workers(workers)
        info, via = calls.resume(self, name, consumed,
                                 spec=None if spec is None else as_spec(spec),
                                 keep_checkpoints=keep_checkpoints, via=via,
                                 checkpoints=checkpoints, run_id=run_id)
        return RemotePipeline(self, info, consumed=consumed, via=via).fan_out(workers)

    def attach(self, name: str, *, workers: int | str = 1) -> RemotePipeline:
        """Consume an existing pipeline from its acknowledged position. ``workers``: the
        servers that compute its batches (see ``open``)."""
        if check_workers(workers) == 1:
            return RemotePipeline(self, self.pipeline(name), via=self.preferred)
        info = self.pipeline(name)
        via = self.reach(info.holder) or self.preferred
        return RemotePipeline(self, info, via=via).fan_out(workers)

    def pipeline(self, name: str, *, via: str | None = None) -> service_pb2.PipelineInfo:
        return calls.describe(self, name, via=via)

    def pipelines(self) -> list[service_pb2.PipelineInfo]:
        return list(self.call("ListPipelines", service_pb2.ListPipelinesRequest()).pipelines)

    def checkpoints(self, name: str, via: str | None = None) -> list[service_pb2.CheckpointInfo]:
        """The checkpoints of ``name`` (asked of the server ``via``, if given)."""
        return calls.list_checkpoints(self, name, via)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        reply = self.call("GetCheckpoint", service_pb2.GetCheckpointRequest(id=checkpoint_id))
        return calls.checkpoint_of(reply.checkpoint, reply.data)

    def checkpoint(self, name: str, consumed: int | None = None, *,
                   via: str | None = None, past_epoch_end: bool = False) -> Checkpoint:
        """Checkpoint ``name`` after ``consumed`` batches, or (operators) after the
        acknowledged ones, which may trail the trainer by the batches in flight.
        ``past_epoch_end``: the trainer met the StopIteration of an external source's epoch
        ending at ``consumed`` (``RemotePipeline.checkpoint`` says it)."""
        return calls.checkpoint(self, name, consumed, via=via, past_epoch_end=past_epoch_end)

    def delete(self, name: str, *, keep_checkpoints: bool = False, force: bool = False) -> None:
        """Delete ``name`` on the server holding it; ``force`` (operators): on any server,
        whoever holds it (a holder still alive is fenced)."""
        calls.delete(self, name, keep_checkpoints=keep_checkpoints, force=force)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
