"""The Conveyor client: ``Client(address)`` and the ``RemotePipeline`` it hands out.

``RemotePipeline.run()`` and iteration share one stream; a batch counts as consumed when
they return it. ``checkpoint()`` records exactly that position. A stream starts at the
consumed count its first request names, so every batch's header index must equal the count
so far: any other raises ``DataLoss`` naming both, and that batch is neither returned nor
acknowledged. Server errors surface as the classes of ``conveyor.errors``, carrying the
gRPC status code and message.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from conveyor import errors
from conveyor.allocator import tune_client_process
from conveyor.channel import (
    AUTHORIZATION_KEY,
    CHANNEL_OPTIONS,
    CHECKPOINT_BATCHES_KEY,
    CHECKPOINT_ID_KEY,
    KEEPALIVE_TIME_S,
    KEEPALIVE_TIMEOUT_S,
    STREAM_BATCHES_PATH,
    bearer,
    client_keepalive,
)
from conveyor.tensor_list import TensorList
from conveyor.v1 import pipeline_pb2, service_pb2, service_pb2_grpc
from conveyor.wire import BatchAssembler

Batch = tuple[TensorList, ...]
#: Acknowledgements are sent at most this often; the server's view of the consumed
#: position (for a drain, or an operator's checkpoint) trails by at most this much.
ACK_INTERVAL_S = 0.01
#: How long ``RemotePipeline.close()`` waits for the last acknowledgement to be sent
#: before it cancels the stream (cancelling drops a message gRPC has not sent yet).
ACK_FLUSH_S = 0.25


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint stored in Redis: its cluster-wide id and the self-contained blob."""

    id: str
    data: bytes
    pipeline: str
    batches: int
    created_unix_ms: int
    server: str


def _error_info(exc: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The reason and metadata of the call's ``ErrorInfo`` detail ("" and {} if none)."""
    try:
        status = rpc_status.from_call(exc)
    except ValueError:  # details that do not match the code and message
        return "", {}
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == errors.DOMAIN:
            return info.reason, dict(info.metadata)
    return "", {}


def _raise(exc: grpc.RpcError) -> errors.ConveyorError:
    """The ``conveyor.errors`` class the server raised (by the reason it sent, else by the
    status code), with its message and metadata."""
    code = exc.code().name if exc.code() is not None else "UNKNOWN"
    reason, metadata = _error_info(exc)
    cls = errors.BY_REASON.get(reason) or errors.BY_CODE.get(code, errors.ConveyorError)
    err = cls.__new__(cls)
    errors.ConveyorError.__init__(err, exc.details() or code, **metadata)
    if isinstance(err, errors.SpecError):
        err.op, err.argument = metadata.get("op", ""), metadata.get("argument") or None
    err.code = code
    trailing = {k: v for k, v in exc.trailing_metadata() or () if isinstance(v, str)}
    err.checkpoint_id = trailing.get(CHECKPOINT_ID_KEY)  # type: ignore[attr-defined]
    batches = trailing.get(CHECKPOINT_BATCHES_KEY)
    err.checkpoint_batches = int(batches) if batches else None  # type: ignore[attr-defined]
    return err


class Client:
    def __init__(self, target: str, *, timeout: float = 30.0, token: str | None = None,
                 stream_timeout: float | None = None,
                 keepalive_s: float = KEEPALIVE_TIME_S,
                 keepalive_timeout_s: float = KEEPALIVE_TIMEOUT_S) -> None:
        """``keepalive_s`` / ``keepalive_timeout_s``: while a call is open, ping the
        server this often and fail the call (UNAVAILABLE) if it does not answer within
        the timeout, so a dead or stopped server never blocks the trainer for ever."""
        self.target = target
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        token = token or os.environ.get("CONVEYOR_TOKEN")
        self._metadata = ((AUTHORIZATION_KEY, bearer(token)),) if token else ()
        self._channel = grpc.insecure_channel(
            target, options=(*CHANNEL_OPTIONS,
                             *client_keepalive(keepalive_s, keepalive_timeout_s)))
        self._stub = service_pb2_grpc.ConveyorStub(self._channel)
        # Batch frames stay encoded: BatchAssembler copies their data straight into place.
        self._stream_frames = self._channel.stream_stream(
            STREAM_BATCHES_PATH,
            request_serializer=service_pb2.StreamBatchesRequest.SerializeToString,
            response_deserializer=None)

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout,
                                               metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _raise(exc) from None

    def create(self, name: str, spec: pipeline_pb2.PipelineSpec, *,
               keep_checkpoints: int = 0) -> RemotePipeline:
        reply = self._call("CreatePipeline", service_pb2.CreatePipelineRequest(
            name=name, spec=spec, keep_checkpoints=keep_checkpoints))
        return RemotePipeline(self, reply.pipeline)

    def restore(self, name: str, checkpoint: str | Checkpoint | bytes, *,
                spec: pipeline_pb2.PipelineSpec | None = None,
                keep_checkpoints: int = 0, consumed: int | None = None) -> RemotePipeline:
        """Host ``name`` on this server from ``checkpoint``. ``consumed``: the batches this
        trainer has really consumed, when that is past the checkpoint (a drain checkpoints
        at the acknowledged position; batches already sent may still have been consumed
        after it): the stream then starts after them, so none is received twice."""
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
        reply = self._call("Restore", request)
        # The trainer's own count rules: its first stream request names it again.
        return RemotePipeline(self, reply.pipeline, consumed=consumed)

    def resume(self, name: str, consumed: int, *,
               spec: pipeline_pb2.PipelineSpec | None = None,
               keep_checkpoints: int = 0) -> RemotePipeline:
        """Host ``name`` on this server at the trainer's own position, ``consumed`` batches:
        from its newest checkpoint at or before that position (a drain's, a trainer's), in
        one call, whether its server drained, died or still holds it (it is fenced)."""
        usable = [c for c in self.checkpoints(name) if c.batches <= consumed]
        if not usable:
            raise errors.NotFound(f"pipeline {name!r} has no checkpoint at or before batch "
                                  f"{consumed}")
        best = max(usable, key=lambda c: (c.batches, c.created_unix_ms))
        return self.restore(name, best.id, spec=spec, keep_checkpoints=keep_checkpoints,
                            consumed=consumed)

    def attach(self, name: str) -> RemotePipeline:
        """Consume an existing pipeline from its acknowledged position."""
        return RemotePipeline(self, self.pipeline(name))

    def pipeline(self, name: str) -> service_pb2.PipelineInfo:
        return self._call("DescribePipeline",
                          service_pb2.DescribePipelineRequest(name=name)).pipeline

    def pipelines(self) -> list[service_pb2.PipelineInfo]:
        return list(self._call("ListPipelines", service_pb2.ListPipelinesRequest()).pipelines)

    def checkpoints(self, name: str) -> list[service_pb2.CheckpointInfo]:
        return list(self._call("ListCheckpoints",
                               service_pb2.ListCheckpointsRequest(name=name)).checkpoints)

    def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        reply = self._call("GetCheckpoint", service_pb2.GetCheckpointRequest(id=checkpoint_id))
        return _checkpoint(reply.checkpoint, reply.data)

    def checkpoint(self, name: str, consumed: int | None = None) -> Checkpoint:
        """Checkpoint ``name`` after ``consumed`` batches, or (operators) after the
        acknowledged ones, which may trail the trainer by the batches in flight."""
        request = service_pb2.CheckpointRequest(name=name)
        if consumed is not None:
            request.consumed = consumed
        reply = self._call("Checkpoint", request)
        return _checkpoint(reply.checkpoint, reply.data)

    def delete(self, name: str, *, keep_checkpoints: bool = False) -> None:
        self._call("DeletePipeline", service_pb2.DeletePipelineRequest(
            name=name, keep_checkpoints=keep_checkpoints))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checkpoint(info: service_pb2.CheckpointInfo, data: bytes) -> Checkpoint:
    return Checkpoint(info.id, data, info.pipeline, info.batches, info.created_unix_ms,
                      info.server)


class _Acknowledgements:
    """The consumer's side of a stream: the opening request, then the consumed count.

    Acknowledgements are cumulative, so only the newest count matters: it is sent at most
    once per ``ACK_INTERVAL_S``, and only when it moved. The trainer's thread records the
    count and wakes the sending thread only when that thread is waiting for news, so a fast
    stream costs a few thread wake-ups per interval instead of several per batch.
    """

    def __init__(self, name: str, consumed: int) -> None:
        self._first = service_pb2.StreamBatchesRequest(name=name, consumed=consumed)
        self._consumed = consumed
        self._news = threading.Event()
        self._closed = False
        self._sent_all = threading.Event()

    def advance(self, consumed: int) -> None:
        self._consumed = consumed  # read by requests() only after it clears _news
        if not self._news.is_set():
            self._news.set()

    def close(self, wait: float = 0.0) -> None:
        """Send the newest count (if it moved) and end the request side; wait up to
        ``wait`` seconds until gRPC has sent it."""
        self._closed = True
        self._news.set()
        if wait:
            self._sent_all.wait(wait)

    def requests(self) -> Iterator[service_pb2.StreamBatchesRequest]:
        yield self._first
        sent = self._first.consumed
        while True:
            self._news.wait()
            # Read before the count: close() comes after the last advance(), so a count
            # read after seeing it closed is the final one. (Checking _closed only after
            # reading the count could end the stream without its final count.)
            closing = self._closed
            if not closing:
                time.sleep(ACK_INTERVAL_S)  # gather what is consumed meanwhile
            self._news.clear()
            consumed = self._consumed
            if consumed != sent:
                sent = consumed
                yield service_pb2.StreamBatchesRequest(consumed=consumed)
            if closing:  # gRPC asked for more: what was yielded is sent
                self._sent_all.set()
                return


class RemotePipeline:
    """A pipeline on a server, consumed like the in-process engine."""

    def __init__(self, client: Client, info: service_pb2.PipelineInfo, *,
                 consumed: int | None = None) -> None:
        self.client = client
        self.name = info.name
        self.info = info
        self._consumed = info.acknowledged if consumed is None else consumed
        self._acks: _Acknowledgements | None = None
        self._responses: Any = None
        self._lock = threading.Lock()

    @property
    def consumed(self) -> int:
        """Batches returned by ``run()`` and iteration, counted from the pipeline's start."""
        return self._consumed

    def _open(self) -> None:
        tune_client_process()
        self._acks = _Acknowledgements(self.name, self._consumed)
        self._responses = self.client._stream_frames(
            self._acks.requests(), timeout=self.client.stream_timeout,
            metadata=self.client._metadata)

    def _close_stream(self, flush: float = 0.0) -> None:
        """End the stream; ``flush``: seconds to wait for the last acknowledgement to go
        out first (a healthy stream being closed; a broken one has nothing to send on)."""
        if self._acks is not None:
            self._acks.close(flush)
        if self._responses is not None:
            self._responses.cancel()
        self._acks = self._responses = None

    def run(self) -> Batch:
        with self._lock:
            if self._responses is None:
                self._open()
            # The stream starts where the first request said (this object's consumed
            # count), so every batch, the first one too, must be the next in order.
            assembler = BatchAssembler(self._consumed, f"the stream of {self.name!r}")
            try:
                for frame in self._responses:
                    batch = assembler.feed(frame)
                    if batch is not None:
                        break
                else:
                    raise errors.Unavailable(f"the stream of {self.name!r} ended")
            except grpc.RpcError as exc:
                self._close_stream()
                raise _raise(exc) from None
            except errors.ConveyorError:
                self._close_stream()
                raise
            self._consumed += 1
            assert self._acks is not None
            self._acks.advance(self._consumed)
            return batch

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.run()

    def checkpoint(self) -> Checkpoint:
        """The position after the batches this object has returned, stored in Redis."""
        return self.client.checkpoint(self.name, self._consumed)

    def describe(self) -> service_pb2.PipelineInfo:
        return self.client.pipeline(self.name)

    def resume(self, on: Client | None = None) -> RemotePipeline:
        """After this pipeline's server drained or died: host it on ``on`` (another
        server; by default this object's) at the position this trainer consumed, and go
        on from there (``Client.resume``). This object is closed."""
        self.close()
        return (on or self.client).resume(self.name, self._consumed)

    def close(self) -> None:
        with self._lock:
            self._close_stream(ACK_FLUSH_S)  # nothing to wait for without a stream

    def __enter__(self) -> RemotePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
