"""The Conveyor client: ``Client(addresses)`` and the ``RemotePipeline`` it hands out.

A client knows one or more servers: a list of addresses, or a DNS name that resolves to
several (a headless Service). A new pipeline (``create``, ``open``, ``restore`` without
``via``) is placed on a lightly loaded live server of the fleet (``placement.py``); any
other call goes to the first that answers; a pipeline's stream
and checkpoints go to the server that holds it (``remote.py``), and follow it when it
moves. Server errors surface as the classes of ``conveyor.errors``, with the server's
reason and metadata.

**At exit.** The clients still open when the interpreter exits are closed by an ``atexit``
hook (``close_at_exit``), while gRPC's threads still run. After the hooks Python stops
every daemon thread where it stands, gRPC's too; one stopped while it held its call's
lock (sending an acknowledgement, handling its event) holds it forever, and a close later
in the exit (a data loader's generator finalised in the interpreter's teardown, gRPC's
own finaliser of a call) waited forever for that lock. Closed by the hook, a client has
nothing left for those finalisers to close.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from conveyor import errors
from conveyor.channel import AUTHORIZATION_KEY, KEEPALIVE_TIME_S, KEEPALIVE_TIMEOUT_S, bearer
from conveyor.connection import (
    Connection,
    addresses,
    close_connections,
    say_where_it_failed,
    server_targets,
)
from conveyor.credentials import TlsOptions, read_token
from conveyor.fan_in import check_workers
from conveyor.opening import open_pipeline
from conveyor.placement import Placement, call_placed, fleet
from conveyor.remote import RemotePipeline
from conveyor.spec import Definition, as_spec
from conveyor.v1 import service_pb2

log = logging.getLogger("conveyor.client")


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


class Client:
    def __init__(self, target: str | Sequence[str], *, timeout: float = 30.0,
                 token: str | None = None, token_file: str | None = None,
                 tls: TlsOptions | Literal[False] | None = None,
                 stream_timeout: float | None = None,
                 keepalive_s: float = KEEPALIVE_TIME_S,
                 keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S,
                 failover: bool = True,
                 placement_seed: int | random.Random | None = None,
                 place: bool = True, data_channel: bool = True) -> None:
        """``target``: a server address, several (a list, or comma-separated), or a DNS
        name resolving to several. ``keepalive_s`` / ``keepalive_timeout_s``: while a call
        is open, ping the server this often and fail the call (UNAVAILABLE) if it does not
        answer within the timeout, so a dead or stopped server never blocks the trainer.
        ``failover``: a ``RemotePipeline`` whose server dies, stops answering or drains is
        resumed on another server at the trainer's position (see ``remote.py``).
        ``token`` / ``token_file``: the bearer token, or the file holding it (else
        ``$CONVEYOR_TOKEN_FILE``, else ``$CONVEYOR_TOKEN``). ``tls``: verify the servers'
        certificate and present this client's (None: ``TlsOptions.from_env()``, the
        ``CONVEYOR_TLS_*`` variables, plaintext without any; False: plaintext whatever the
        environment says); see ``credentials.py``.

        New pipelines (``create``, ``open``, ``restore`` without ``via``) are placed by two
        random choices weighted by free capacity: two live servers drawn with weights of
        their free pipeline slots times their idle fraction, the less loaded of the two
        taking it; draining and full servers are skipped. The fleet is learnt from the
        servers' records in Redis through any target (``placement.py``).
        ``placement_seed``: the seed (or the ``random.Random``) of those draws, for a
        repeatable placement; None: a fresh one. ``place``: False sends new pipelines to
        the targets too, as every other call (a server creating its own configured
        pipelines through its API).

        ``data_channel``: receive batch bytes on a data channel of each stream and fan-in
        call (a TCP connection to the server's data port, outside gRPC's messages; see
        ``data_channel.py``) where the server offers one; a server whose data port cannot
        be reached sends them in gRPC frames (said once in the log). False: always in gRPC
        frames."""
        self.targets = server_targets(target, "conveyor.Client", "target")
        self.target = self.targets[0]
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.failover = failover
        token = read_token(token, token_file)
        self.tls = TlsOptions.from_env() if tls is None else tls or None
        self._metadata = ((AUTHORIZATION_KEY, bearer(token)),) if token else ()
        self._keepalive = (keepalive_s, keepalive_timeout_s)
        self.data_channel = data_channel
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        #: The pipelines handed out, whose streams ``close()`` ends first.
        self._pipelines: weakref.WeakSet[RemotePipeline] = weakref.WeakSet()
        self._preferred = self.targets[0]
        self._placement = None if not place else Placement(
            placement_seed if isinstance(placement_seed, random.Random)
            else random.Random(placement_seed))
        _OPEN_AT_EXIT.add(self)

    # -- servers ---------------------------------------------------------------------

    def adopt(self, pipeline: RemotePipeline) -> None:
        """Remember ``pipeline`` (as long as it lives), so that ``close()`` ends its stream."""
        with self._lock:
            self._pipelines.add(pipeline)

    def connection(self, address: str) -> Connection:
        """The (shared) connection to ``address``."""
        with self._lock:
            conn = self._connections.get(address)
            if conn is None:
                conn = self._connections[address] = Connection(
                    address, self._metadata, self._keepalive, self.tls, self.targets,
                    self.data_channel)
            return conn

    def servers(self) -> list[str]:
        """Every server address the targets name now (DNS is asked again each time)."""
        return addresses(self.targets)

    def fleet(self) -> list[service_pb2.ServerInfo]:
        """The live servers with their capacity and load, as they last published them."""
        return fleet(self)

    def _placed(self, method: str, request: Any) -> tuple[Any, str]:
        """``method`` on the server placement chooses: the reply and that server."""
        if self._placement is None:
            return self._call(method, request), self._preferred
        return call_placed(self, self._placement, method, request)

    def _call(self, method: str, request: Any, timeout: float | None = None, *,
              via: str | None = None) -> Any:
        """Call ``via`` that server, or the first that answers (UNAVAILABLE: the next)."""
        if via is not None:
            return self.connection(via).call(method, request, timeout or self.timeout)
        try:
            return self.connection(self._preferred).call(method, request,
                                                         timeout or self.timeout)
        except errors.Unavailable as exc:
            if isinstance(exc, errors.Draining):
                raise
            failure = exc
        # Only now are the other servers looked up (DNS is asked again each time).
        others = [a for a in self.servers() if a != self._preferred]
        for address in others:
            try:
                reply = self.connection(address).call(method, request,
                                                      timeout or self.timeout)
            except errors.Unavailable as exc:
                if isinstance(exc, errors.Draining):
                    raise
                continue
            self._preferred = address
            return reply
        say_where_it_failed(failure, self._preferred, others, method)
        raise failure

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
        reply, holder = self._placed("CreatePipeline", service_pb2.CreatePipelineRequest(
            name=name, spec=as_spec(spec), keep_checkpoints=keep_checkpoints, run_id=run_id,
            job=job))
        return RemotePipeline(self, reply.pipeline, via=holder).fan_out(workers)

    def open(self, name: str, spec: Definition, *, run_id: str | None = None,
             rank: int = 0, world_size: int = 1, consumed: int | None = None,
             keep_checkpoints: int = 0, workers: int | str = 1,
             replace: bool = False) -> RemotePipeline:
        """Create ``name``, or, if it exists (on any server, alive or dead), resume it:
        the same ``run_id`` (or None) goes on where the run stood, at its newest
        checkpoint or after ``consumed`` batches; another ``run_id`` starts a fresh stream
        from batch 0 with the same spec. See ``opening.py``. ``replace``: where ``name``
        exists with another spec, delete it with its checkpoints and create this spec under
        the name (from batch 0), instead of SpecMismatch.

        ``rank`` / ``world_size``: this trainer's share of a data-parallel job named
        ``name``: rank r of N takes, at every step, the r-th of the next N batches of the
        one-rank sequence; a job goes on with any world size from the latest step all its
        ranks checkpointed (or from ``consumed``, the trainer's own step). See
        ``opening.py``.

        ``workers``: how many servers compute the batches (fan-in, ``fan_in.py``): 1 (the
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
        request = service_pb2.RestoreRequest(name=name, keep_checkpoints=keep_checkpoints)
        if isinstance(checkpoint, Checkpoint):
            request.checkpoint_id = checkpoint.id
        elif isinstance(checkpoint, str):
            request.checkpoint_id = checkpoint
        else:
            request.data = bytes(checkpoint)
        if spec is not None:
            request.spec.CopyFrom(as_spec(spec))
        if consumed is not None:
            request.consumed = consumed  # checked by the server before it takes the name
        if run_id is not None:
            request.run_id = run_id
        if job is not None:
            request.job.CopyFrom(job)
        if via is None:
            reply, via = self._placed("Restore", request)
        else:
            reply = self._call("Restore", request, via=via)
        # The trainer's own count rules: its first stream request names it again.
        return RemotePipeline(self, reply.pipeline, consumed=consumed,
                              via=via).fan_out(workers)

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
        found = checkpoints if checkpoints is not None else self.checkpoints(name, via)
        usable = [c for c in found if c.batches <= consumed]
        if not usable:
            raise errors.NotFound(f"pipeline {name!r} has no checkpoint at or before batch "
                                  f"{consumed}")
        best = max(usable, key=lambda c: (c.batches, c.created_unix_ms))
        return self.restore(name, best.id, spec=spec, keep_checkpoints=keep_checkpoints,
                            consumed=consumed, via=via, run_id=run_id, workers=workers)

    def attach(self, name: str, *, workers: int | str = 1) -> RemotePipeline:
        """Consume an existing pipeline from its acknowledged position. ``workers``: the
        servers that compute its batches (see ``open``)."""
        if check_workers(workers) == 1:
            return RemotePipeline(self, self.pipeline(name), via=self._preferred)
        info = self.pipeline(name)
        return RemotePipeline(self, info, via=info.holder or self._preferred).fan_out(workers)

    def pipeline(self, name: str, *, via: str | None = None) -> service_pb2.PipelineInfo:
        return self._call("DescribePipeline",
                          service_pb2.DescribePipelineRequest(name=name), via=via).pipeline

    def pipelines(self) -> list[service_pb2.PipelineInfo]:
        return list(self._call("ListPipelines", service_pb2.ListPipelinesRequest()).pipelines)

    def checkpoints(self, name: str, via: str | None = None) -> list[service_pb2.CheckpointInfo]:
        """The checkpoints of ``name`` (asked of the server ``via``, if given)."""
        return list(self._call("ListCheckpoints", service_pb2.ListCheckpointsRequest(name=name),
                               via=via).checkpoints)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        reply = self._call("GetCheckpoint", service_pb2.GetCheckpointRequest(id=checkpoint_id))
        return checkpoint_of(reply.checkpoint, reply.data)

    def checkpoint(self, name: str, consumed: int | None = None, *,
                   via: str | None = None, past_epoch_end: bool = False) -> Checkpoint:
        """Checkpoint ``name`` after ``consumed`` batches, or (operators) after the
        acknowledged ones, which may trail the trainer by the batches in flight.
        ``past_epoch_end``: the trainer met the StopIteration of an external source's epoch
        ending at ``consumed`` (``RemotePipeline.checkpoint`` says it)."""
        request = service_pb2.CheckpointRequest(name=name, past_epoch_end=past_epoch_end)
        if consumed is not None:
            request.consumed = consumed
        reply = self._call("Checkpoint", request, via=via)
        return checkpoint_of(reply.checkpoint, reply.data)

    def delete(self, name: str, *, keep_checkpoints: bool = False, force: bool = False) -> None:
        """Delete ``name`` on the server holding it; ``force`` (operators): on any server,
        whoever holds it (a holder still alive is fenced)."""
        self._call("DeletePipeline", service_pb2.DeletePipelineRequest(
            name=name, keep_checkpoints=keep_checkpoints, force=force))

    def close(self) -> None:
        """Close every connection (their streams are cancelled); within
        ``connection.CLOSE_WAIT_S`` whatever state the servers are in, and from any thread
        or finaliser (see ``connection.py``). The pipelines it handed out are closed first
        (``RemotePipeline.close``: their streams' request threads end, their calls are
        cancelled and let go of), so no call is left for gRPC's threads to finish. The
        client may be used again afterwards: it connects anew. A client not closed is
        closed as the interpreter exits (``close_at_exit``)."""
        with self._lock:
            pipelines = list(self._pipelines)
        for pipeline in pipelines:
            pipeline.close()
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        close_connections(connections)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: This process's clients (weakly: a client dropped leaves), closed by ``close_at_exit``.
_OPEN_AT_EXIT: weakref.WeakSet[Client] = weakref.WeakSet()


def close_at_exit() -> None:
    """Close every client of this process (an ``atexit`` hook; see the module's doc): their
    pipelines' streams end, their last acknowledgements are sent, their channels close,
    all while gRPC's threads can still finish what they hold."""
    for client in list(_OPEN_AT_EXIT):
        try:
            client.close()
        except Exception:  # (one client's failure leaves the others to close)
            log.exception("conveyor: closing a client at exit failed")


atexit.register(close_at_exit)
# A forked child's copies of its parent's clients are not its own to close: the parent's
# gRPC threads do not run there, and a lock one of them held stays held in the child.
os.register_at_fork(after_in_child=_OPEN_AT_EXIT.clear)


def checkpoint_of(info: service_pb2.CheckpointInfo, data: bytes) -> Checkpoint:
    return Checkpoint(info.id, data, info.pipeline, info.batches, info.created_unix_ms,
                      info.server, info.run_id)

