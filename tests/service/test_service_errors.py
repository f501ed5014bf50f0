"""Every status code from a real request; Redis outages; the SIGTERM drain; big batches."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import conveyor
from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.support.images import make_image_folder
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import DEADLINE, Start, client, wait_for


def test_invalid_spec_is_invalid_argument_naming_op_and_argument(
    start_server: Start, image_root: Path
) -> None:
    spec = rotate_pipeline(str(image_root / "imgs")).spec
    spec.ops[3].args["interp_type"].s = "sideways"
    with client(start_server()) as c, \
            pytest.raises(errors.InvalidArgument, match="rotate: argument 'interp_type'"):
        c.create("bad", spec)
    with client(start_server()) as c, pytest.raises(errors.InvalidArgument, match="name"):
        c.create("no spaces allowed", rotate_pipeline(str(image_root / "imgs")))


def test_not_found_already_exists_and_second_consumer(
    start_server: Start, image_root: Path
) -> None:
    with client(start_server()) as c:
        with pytest.raises(errors.NotFound, match="ghost"):
            c.pipeline("ghost")
        with pytest.raises(errors.NotFound):
            c.restore("x", checkpoint="ghost:7")
        spec = rotate_pipeline(str(image_root / "imgs"))
        first = c.create("once", spec)
        with pytest.raises(errors.AlreadyExists, match="held by server"):
            c.create("once", spec)
        first.run()
        second = c.attach("once")  # a newer consumer takes the stream over
        assert second.run() is not None
        with pytest.raises(errors.Aborted, match="a newer consumer took over"):
            for _ in range(100):  # what was sent before the takeover comes first
                first.run()
        first.close()
        second.close()
        c.delete("once")
        with pytest.raises(errors.NotFound):
            c.pipeline("once")


def test_checkpointing_disabled_is_failed_precondition(
    start_server: Start, image_root: Path
) -> None:
    with client(start_server()) as c:
        pipe = c.create("nockpt", rotate_pipeline(str(image_root / "imgs"),
                                                  enable_checkpointing=False))
        pipe.run()
        with pytest.raises(errors.FailedPrecondition, match="enable_checkpointing=True"):
            pipe.checkpoint()


def test_paths_outside_the_data_roots_are_permission_denied(
    start_server: Start, image_root: Path, tmp_path: Path
) -> None:
    outside = make_image_folder(tmp_path / "outside", counts=(2,))
    inside = image_root / "links"
    inside.mkdir(exist_ok=True)
    if not (inside / "escape").exists():
        os.symlink(outside, inside / "escape")
    with client(start_server()) as c:
        for root in (str(outside), str(image_root / "imgs" / ".." / ".." / outside.name),
                     str(inside / "escape")):
            with pytest.raises(errors.PermissionDenied, match="outside the data roots"):
                c.create("escape", rotate_pipeline(root))


def test_limits_are_resource_exhausted(start_server: Start, image_root: Path) -> None:
    with client(start_server("--max-pipelines", "1")) as c:
        c.create("one", rotate_pipeline(str(image_root / "imgs")))
        with pytest.raises(errors.ResourceExhausted, match="limits.max_pipelines = 1"):
            c.create("two", rotate_pipeline(str(image_root / "imgs")))


def test_token_is_required_when_configured(start_server: Start, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("alice: s3cret-of-alice-0123\n")
    server = start_server("--tokens-file", str(tokens))
    with client(server) as anonymous, pytest.raises(errors.Unauthenticated):
        anonymous.pipelines()
    with client(server, token="s3cret-of-alice-0123") as allowed:
        assert allowed.pipelines() == []


def test_corrupt_data_file_is_data_loss_naming_it_and_keeps_the_position(
    start_server: Start, tmp_path: Path
) -> None:
    root = make_image_folder(tmp_path / "root" / "imgs", counts=(4, 4))
    spec = rotate_pipeline(str(root), batch_size=4, prefetch_queue_depth=1)
    with Pipeline(spec) as local:
        expected = run_batches(local, 3)
    victim = root / "class_0" / "img_002.jpg"
    good = victim.read_bytes()
    victim.write_bytes(bytes(len(good)))  # same size, not an image; read in batch 0 or 1
    with client(start_server(roots=[tmp_path / "root"])) as c:
        pipe = c.create("damaged", spec)
        got: list[Any] = []
        failures = 0
        while len(got) < 3:
            try:
                got.append(pipe.run())
            except errors.DataLoss as exc:
                failures += 1
                assert "img_002.jpg" in exc.message
                # The engine dropped its prefetch and stands where the consumer stands; the
                # next stream starts there (the consumer sends its position).
                info = c.pipeline("damaged")
                assert info.produced == info.sent == len(got) >= info.acknowledged
                victim.write_bytes(good)
        assert failures == 1
        assert [batch_bytes(b) for b in got] == [batch_bytes(b) for b in expected]


def test_redis_outage_keeps_streams_and_checkpoint_is_unavailable_within_deadline(
    start_server: Start, image_root: Path, redis_proc: RedisProcess
) -> None:
    """A Redis that is gone (not failing over) is tried for ``redis.failover_s`` and then
    reported: UNAVAILABLE within that bound, saying so and what to do."""
    with client(start_server(env={"CONVEYOR_REDIS_FAILOVER_S": "1"})) as c:
        pipe = c.create("outage", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
        pipe.run()
        redis_proc.stop()
        for _ in range(5):
            pipe.run()  # the stream goes on without Redis
        started = time.monotonic()
        with pytest.raises(errors.Unavailable, match=str(redis_proc.socket)) as caught:
            pipe.checkpoint()
        waited = time.monotonic() - started
        assert 0.5 < waited < 3.0, (waited, caught.value.message)
        assert "@" not in caught.value.message
        assert re.search(r"is unreachable \(checkpoint\): ConnectionError; tried for "
                         r"[0-9.]+ s \(redis.failover_s: 1 s\) and no primary answered: "
                         r"Redis is down, or fails over slower than that; check that Redis",
                         caught.value.message)
        redis_proc.start()
        ckpt = pipe.checkpoint()
        assert ckpt.batches == 6
        expected = pipe.run()
        assert batch_bytes(c.restore("outage-copy", checkpoint=ckpt.id).run()) == \
            batch_bytes(expected)


def test_a_redis_gone_is_tried_only_until_the_callers_deadline(
    start_server: Start, image_root: Path, redis_proc: RedisProcess
) -> None:
    """``redis.failover_s`` longer than the caller's deadline: the server stops trying in
    time to answer it, and says so."""
    with client(start_server(env={"CONVEYOR_REDIS_FAILOVER_S": "60"})) as c:
        pipe = c.create("cut", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
        pipe.run()
        redis_proc.stop()
        short = conveyor.Client(c.target, timeout=3)
        try:
            started = time.monotonic()
            with pytest.raises(errors.Unavailable, match="until the caller's deadline: a "
                               "failover may still be under way"):
                short.checkpoint("cut", consumed=1)
            assert time.monotonic() - started < 3
        finally:
            short.close()
        redis_proc.start()
        assert pipe.checkpoint().batches == 1


def test_checkpoint_answers_within_a_short_deadline_when_redis_hangs(
    start_server: Start, image_root: Path, redis_proc: RedisProcess
) -> None:
    with client(start_server()) as c:
        pipe = c.create("hang", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
        pipe.run()
        redis_proc.pause()
        try:
            short = conveyor.Client(c.target, timeout=0.4)
            started = time.monotonic()
            with pytest.raises(errors.Unavailable, match="within the caller's deadline"):
                short.checkpoint("hang", consumed=1)
            assert time.monotonic() - started < 0.4
            short.close()
        finally:
            redis_proc.resume()
        assert pipe.checkpoint().batches == 1


def test_sigterm_drain_ends_the_stream_with_a_usable_checkpoint(
    start_server: Start, image_root: Path
) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    with client(a, failover=False) as ca, client(b) as cb:  # the trainer moves it itself
        pipe = ca.create("drain", spec)
        run_batches(pipe, 2)  # type: ignore[arg-type]
        import threading
        threading.Timer(0.2, a.terminate).start()
        with pytest.raises(errors.Unavailable, match="shutting down") as caught:
            for _ in range(10_000):
                pipe.run()
        drained = caught.value.checkpoint_id  # type: ignore[attr-defined]
        assert drained and caught.value.checkpoint_batches == pipe.consumed  # type: ignore[attr-defined]
        restored = cb.restore("drain", checkpoint=drained)
        with Pipeline(spec) as local:
            expected = run_batches(local, pipe.consumed + 1)[-1]
        assert batch_bytes(restored.run()) == batch_bytes(expected)
        assert a.proc is not None and a.proc.wait(DEADLINE) == 0


def test_a_slow_consumer_resumes_after_what_it_consumed_past_the_drain(
    start_server: Start, image_root: Path
) -> None:
    """The drain checkpoints at the acknowledged position; batches sent before it and
    consumed after it are not received twice when the trainer restores with its count."""
    a, b = start_server("--grace", "1"), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, prefetch_queue_depth=4)
    with client(a, failover=False) as ca, client(b) as cb:  # the trainer moves it itself
        pipe = ca.create("slow", spec)
        run_batches(pipe, 2)  # type: ignore[arg-type]
        wait_for(lambda: ca.pipeline("slow").sent >= 4, "the server to send ahead")
        assert a.proc is not None
        a.proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)  # a long training step: the drain gives up waiting (grace / 2)
        with pytest.raises(errors.Unavailable, match="shutting down") as caught:
            for _ in range(2000):  # a busy machine may take a while to start the drain
                pipe.run()  # the batches sent before the drain are still delivered
        drained = caught.value.checkpoint_id  # type: ignore[attr-defined]
        at = caught.value.checkpoint_batches  # type: ignore[attr-defined]
        assert 2 <= at < pipe.consumed, "the trainer consumed past the drain's checkpoint"
        with Pipeline(spec) as local:
            expected = run_batches(local, pipe.consumed + 1)
        resumed = cb.restore("slow", checkpoint=drained, consumed=pipe.consumed)
        assert batch_bytes(resumed.run()) == batch_bytes(expected[pipe.consumed])
        copy = cb.restore("slow-copy", checkpoint=drained)  # without the count: repeats
        assert batch_bytes(copy.run()) == batch_bytes(expected[at])
        with pytest.raises(errors.InvalidArgument, match="before the checkpoint"):
            cb.restore("slow-early", checkpoint=drained, consumed=1)


@pipeline_def(batch_size=3, seed=5, enable_checkpointing=True)
def big_pipeline(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    return fn.resize(images, size=(1100, 1000)), labels


def test_batches_larger_than_4_mib_round_trip(start_server: Start, image_root: Path) -> None:
    spec = big_pipeline(str(image_root / "imgs"))
    with client(start_server()) as c, Pipeline(spec) as local:
        remote = c.create("big", spec)
        for _ in range(2):
            got, want = remote.run(), local.run()
            assert sum(s.nbytes for s in got[0]) > 4 << 20
            assert batch_bytes(got) == batch_bytes(want)


def test_health_answers_and_reflection_is_a_switch(start_server: Start) -> None:
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    without, with_reflection = start_server(), start_server("--reflection")
    for server in (without, with_reflection):
        with grpc.insecure_channel(server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = health.Check(health_pb2.HealthCheckRequest(service="conveyor.v1.Conveyor"),
                                 timeout=DEADLINE)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(without.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        with pytest.raises(grpc.RpcError) as off:
            list(stub.ServerReflectionInfo(iter([request]), timeout=DEADLINE))
        assert off.value.code() == grpc.StatusCode.UNIMPLEMENTED  # off by default
    with grpc.insecure_channel(with_reflection.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = list(stub.ServerReflectionInfo(iter([request]), timeout=DEADLINE))
        names = {s.name for s in answers[0].list_services_response.service}
        assert {"conveyor.v1.Conveyor", "grpc.health.v1.Health"} <= names


def test_corrupt_checkpoint_is_data_loss(start_server: Start, image_root: Path) -> None:
    with client(start_server()) as c:
        pipe = c.create("ck", rotate_pipeline(str(image_root / "imgs")))
        pipe.run()
        blob = pipe.checkpoint().data
        for damaged in (blob[:-7], blob[:30] + bytes([blob[30] ^ 0xFF]) + blob[31:]):
            with pytest.raises(errors.DataLoss, match="checkpoint"):
                c.restore("ck-copy", checkpoint=damaged)
        with pytest.raises(errors.NotFound):
            c.pipeline("ck-copy")  # a refused restore claims nothing
