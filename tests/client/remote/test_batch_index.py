"""The client checks every batch's header index against its consumed count.

A stream starts at the position the client's first request names (its consumed count,
from the pipeline's start), so the n-th batch after it must carry exactly that count plus
n. Any other index raises ``DataLoss`` naming both numbers: the batch is not returned, not
counted and not acknowledged. The wrong indices come from a real gRPC server in this
process that sends real frames (``conveyor.transport.wire.encode_frames``) with a scripted index
sequence; the normal case runs against real ``conveyor-server`` processes.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

import conveyor
from conveyor import errors
from conveyor.tensor_list import TensorList
from conveyor.transport.channel import CHANNEL_OPTIONS
from conveyor.transport.wire import BatchAssembler, encode_frames
from conveyor.v1 import service_pb2, service_pb2_grpc
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import assert_same_stream, run_batches
from tests.support.servers import DEADLINE, Start, client, wait_for

#: Indices a stream sends, given the position its first request named.
Script = Callable[[int], list[int]]


def batch(index: int) -> tuple[TensorList, ...]:
    """A small batch whose bytes name its index (so a test sees which batch it got)."""
    return (TensorList([np.full((3, 4), index % 256, np.uint8) for _ in range(2)], "HW"),
            TensorList([np.array([index], np.int64) for _ in range(2)]))


class ScriptedServicer(service_pb2_grpc.ConveyorServicer):
    """A Conveyor service holding one pipeline whose streams send ``script``'s indices."""

    def __init__(self, acknowledged: int, script: Script) -> None:
        self.acknowledged = acknowledged
        self.script = script
        self.starts: list[int] = []  # the position each stream's first request named
        self.acks: list[int] = []  # every acknowledgement received, in order
        self.ended = threading.Event()

    def info(self, name: str) -> service_pb2.PipelineInfo:
        return service_pb2.PipelineInfo(name=name, holder="scripted",
                                        acknowledged=self.acknowledged)

    def DescribePipeline(self, request: Any, context: Any) -> Any:  # noqa: N802
        return service_pb2.DescribePipelineResponse(pipeline=self.info(request.name))

    def Restore(self, request: Any, context: Any) -> Any:  # noqa: N802
        return service_pb2.RestoreResponse(pipeline=self.info(request.name),
                                           batches=self.acknowledged)

    def StreamBatches(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:  # noqa: N802
        first = next(requests)
        self.starts.append(first.consumed)
        self.ended.clear()
        threading.Thread(target=self._read_acks, args=(requests,), daemon=True).start()
        for index in self.script(first.consumed):
            for frame in encode_frames(index, batch(index), frame_bytes=16):
                yield service_pb2.StreamBatchesResponse.FromString(frame)
        while context.is_active():  # the stream stays open until the client leaves
            time.sleep(0.01)

    def _read_acks(self, requests: Iterator[Any]) -> None:
        try:
            for request in requests:
                self.acks.append(request.consumed)
        except Exception:  # the stream ended
            pass
        self.ended.set()


@pytest.fixture
def scripted() -> Iterator[Callable[[int, Script], tuple[ScriptedServicer, conveyor.Client]]]:
    """Start a scripted server on a free port; returns it and a client of it."""
    servers: list[grpc.Server] = []
    clients: list[conveyor.Client] = []

    def start(acknowledged: int, script: Script) -> tuple[ScriptedServicer, conveyor.Client]:
        servicer = ScriptedServicer(acknowledged, script)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=CHANNEL_OPTIONS)
        service_pb2_grpc.add_ConveyorServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        clients.append(conveyor.Client(f"127.0.0.1:{port}", timeout=DEADLINE,
                                       stream_timeout=DEADLINE))
        return servicer, clients[-1]

    try:
        yield start
    finally:
        for c in clients:
            c.close()
        for server in servers:
            server.stop(None)


def index_of(got: tuple[TensorList, ...]) -> int:
    return int(got[1][0][0])


def test_a_skipped_batch_is_data_loss_and_is_neither_returned_nor_acknowledged(
        scripted: Callable[[int, Script], tuple[ScriptedServicer, conveyor.Client]]) -> None:
    servicer, c = scripted(5, lambda start: [start, start + 2, start + 3])
    pipe = c.attach("p")
    assert pipe.consumed == 5
    assert index_of(pipe.run()) == 5
    wait_for(lambda: servicer.acks == [6], "the acknowledgement of batch 5")
    with pytest.raises(errors.DataLoss,
                       match=r"^batch index 7 received, expected 6: the stream of 'p'") as caught:
        pipe.run()
    assert caught.value.code == "DATA_LOSS"
    assert pipe.consumed == 6  # the bad batch was not counted
    assert servicer.ended.wait(DEADLINE), "the stream was not closed"
    assert servicer.acks == [6]  # nor acknowledged
    # The next call opens a new stream at the consumer's real position.
    servicer.script = lambda start: [start]
    assert index_of(pipe.run()) == 6
    assert servicer.starts == [5, 6] and pipe.consumed == 7
    pipe.close()


def test_the_first_batch_of_a_stream_is_checked_against_the_known_position(
        scripted: Callable[[int, Script], tuple[ScriptedServicer, conveyor.Client]]) -> None:
    servicer, c = scripted(5, lambda start: [start + 2])
    pipe = c.attach("p")
    with pytest.raises(errors.DataLoss, match=r"^batch index 7 received, expected 5: "):
        pipe.run()
    assert pipe.consumed == 5
    assert servicer.ended.wait(DEADLINE)
    assert servicer.acks == []  # nothing moved, nothing acknowledged


def test_a_repeated_batch_is_data_loss(
        scripted: Callable[[int, Script], tuple[ScriptedServicer, conveyor.Client]]) -> None:
    _servicer, c = scripted(0, lambda start: [start, start + 1, start + 1])
    with c.attach("p") as pipe:
        assert [index_of(pipe.run()) for _ in range(2)] == [0, 1]
        with pytest.raises(errors.DataLoss, match=r"^batch index 1 received, expected 2: "):
            pipe.run()
        assert pipe.consumed == 2


def test_a_stream_behind_a_restore_with_consumed_is_data_loss(
        scripted: Callable[[int, Script], tuple[ScriptedServicer, conveyor.Client]]) -> None:
    """A trainer that restores with its own count (past the checkpoint) must get the batch
    after it, never the checkpoint's batch again, even from a server that ignores it."""
    servicer, c = scripted(5, lambda start: [5, 6, 7, 8, 9])
    pipe = c.restore("p", checkpoint="p:1-0000000000000000", consumed=8)
    assert pipe.consumed == 8
    with pytest.raises(errors.DataLoss, match=r"^batch index 5 received, expected 8: "):
        pipe.run()
    assert servicer.starts == [8] and pipe.consumed == 8
    pipe.close()


def test_the_assembler_checks_each_header_before_taking_its_data() -> None:
    assembler = BatchAssembler(3, "the test stream")
    for index in (3, 4):
        got = None
        for frame in encode_frames(index, batch(index), frame_bytes=16):
            got = assembler.feed(frame)
        assert got is not None and index_of(got) == index
    assert assembler.expected == 5
    frames = list(encode_frames(9, batch(9), frame_bytes=16))
    with pytest.raises(errors.DataLoss,
                       match=r"^batch index 9 received, expected 5: the test stream "):
        assembler.feed(frames[0])
    anything = BatchAssembler()  # no expected index: any is accepted
    for frame in frames:
        got = anything.feed(frame)
    assert got is not None and index_of(got) == 9 and anything.expected is None


def test_real_streams_pass_the_check_across_reconnects_restores_and_drains(
        start_server: Start, image_root: Path) -> None:
    a, b = start_server("--grace", "1"), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, prefetch_queue_depth=4)
    # A's client does not fail over (it would learn B from the fleet's records): the drain
    # reaches the trainer, which restores on B itself.
    with client(a, failover=False) as ca, client(b) as cb, Pipeline(spec) as local:
        expected = run_batches(local, 7)
        pipe = ca.create("idx", spec)
        got = run_batches(pipe, 3)  # type: ignore[arg-type]
        ckpt = pipe.checkpoint()
        wait_for(lambda: ca.pipeline("idx").sent > 4, "the server to send ahead")
        pipe.close()  # sent but unconsumed batches are dropped; the next stream starts at 3
        got += run_batches(pipe, 2)  # type: ignore[arg-type]
        wait_for(lambda: ca.pipeline("idx").acknowledged == 5, "the acknowledgements")
        pipe.close()
        attached = ca.attach("idx")  # starts at the acknowledged position
        got += run_batches(attached, 2)  # type: ignore[arg-type]
        assert_same_stream(expected, got, "reconnected streams")
        copy = cb.restore("idx-copy", checkpoint=ckpt)  # from the checkpoint's position
        from_copy = run_batches(copy, 2)  # type: ignore[arg-type]
        assert_same_stream(expected[3:5], from_copy, "restored copy")
        # A drain while the trainer is behind: it keeps consuming what was sent, then
        # restores on b with its count, past the drain's checkpoint.
        wait_for(lambda: ca.pipeline("idx").sent >= attached.consumed + 2, "sending ahead")
        assert a.proc is not None
        a.proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)  # a long training step: the drain gives up waiting (grace / 2)
        with pytest.raises(errors.Unavailable, match="shutting down") as caught:
            for _ in range(2000):  # a busy machine may take a while to start the drain
                got.append(attached.run())
        drained = caught.value.checkpoint_id  # type: ignore[attr-defined]
        assert drained and len(got) == attached.consumed
        at = caught.value.checkpoint_batches  # type: ignore[attr-defined]
        assert 7 <= at < attached.consumed, "the trainer consumed past the drain's checkpoint"
        resumed = cb.restore("idx", checkpoint=drained, consumed=attached.consumed)
        got += run_batches(resumed, 2)  # type: ignore[arg-type]
        expected += run_batches(local, len(got) - len(expected))
        assert_same_stream(expected, got, "drained and restored stream")
        assert resumed.consumed == len(got)
        assert a.proc.wait(DEADLINE) == 0
