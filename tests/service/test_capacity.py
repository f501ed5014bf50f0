"""Capacity, with a real server: streams beyond ``limits.max_streams`` are refused with
RESOURCE_EXHAUSTED naming the limit; streams never starve unary RPCs or health checks; a
stream that does not name its pipeline in time is cancelled and frees its slot."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from conveyor import errors
from conveyor.transport.channel import STREAM_BATCHES_PATH, health_status
from conveyor.v1 import service_pb2
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import Start, client, wait_for

LIMITS = {"CONVEYOR_LIMITS_MAX_STREAMS": "2", "CONVEYOR_LIMITS_FIRST_MESSAGE_S": "1"}


def test_streams_beyond_the_cap_are_refused_and_unary_calls_still_answer(
        start_server: Start, image_root: Path) -> None:
    server = start_server(env=LIMITS)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server) as c:
        pipes = [c.create(f"p{i}", spec) for i in range(3)]
        for pipe in pipes[:2]:
            pipe.run()
        with pytest.raises(errors.ResourceExhausted, match=r"limits.max_streams = 2"):
            pipes[2].run()
        with grpc.insecure_channel(server.address) as channel:
            for _ in range(20):  # every RPC thread a stream can hold is held
                started = time.monotonic()
                assert health_status(channel, "", 5) == 1  # SERVING
                c.pipeline("p0")
                assert time.monotonic() - started < 1
        pipes[0].close()
        wait_for(lambda: not c.pipeline("p0").streaming, "the first stream to end")
        assert pipes[2].run() is not None


def test_a_stream_that_names_no_pipeline_is_cancelled(start_server: Start) -> None:
    server = start_server(env=LIMITS)
    with grpc.insecure_channel(server.address) as channel:
        idle = channel.stream_stream(
            STREAM_BATCHES_PATH,
            request_serializer=service_pb2.StreamBatchesRequest.SerializeToString,
            response_deserializer=None)

        done = threading.Event()

        def silence() -> Iterator[service_pb2.StreamBatchesRequest]:
            done.wait(30)  # opens the stream, never names a pipeline
            yield from ()

        started = time.monotonic()
        try:
            with pytest.raises(grpc.RpcError) as caught:
                next(iter(idle(silence(), timeout=20)))
        finally:
            done.set()
        assert caught.value.code() == grpc.StatusCode.CANCELLED
        assert time.monotonic() - started < 10
