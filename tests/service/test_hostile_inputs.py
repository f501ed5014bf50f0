"""Hostile inputs against real servers: structured fuzzing of pipeline specs and of every
request message, random bytes as the request body of every method, and damaged
checkpoints. No answer is ever UNKNOWN or INTERNAL (nor a hang or a dead server), and
afterwards the server still serves: its health check says SERVING and a normal pipeline
streams the same bytes as in process.

``CONVEYOR_FUZZ_MESSAGES`` sets how many examples the three fuzz tests draw between them
(default 300: the file runs in well under a minute), each one message, and one more where
a pipeline was created (its first batch is streamed); ``CONVEYOR_FUZZ_SEED`` seeds them
(default fixed, so a failure reproduces); ``CONVEYOR_FUZZ_CHECKPOINTS`` sets how many
damaged checkpoints are sent (default 1,000). Each test prints the messages it sent by the
status code answered, and the server's peak RSS. The long run, about 12,900 messages:

    CONVEYOR_FUZZ_MESSAGES=12000 .venv/bin/python -m pytest -q -p no:cacheprovider \\
        tests/service/test_hostile_inputs.py -o timeout=3600
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from conveyor.transport.channel import SERVING, health_status
from conveyor.v1 import checkpoint_pb2, service_pb2
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.identity import checkpoint as ckpt
from tests.support.hostile import FORBIDDEN, METHODS, call, raw_bodies, requests, specs
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import ServerProcess, Start, client

FUZZ_MESSAGES = int(os.environ.get("CONVEYOR_FUZZ_MESSAGES", "300"))
FUZZ_SEED = int(os.environ.get("CONVEYOR_FUZZ_SEED", "20260214"))
FUZZ_CHECKPOINTS = int(os.environ.get("CONVEYOR_FUZZ_CHECKPOINTS", "1000"))
#: Tight limits, so that small messages reach them and every batch is quick to make.
FUZZ_LIMITS = {
    "CONVEYOR_LIMITS_MAX_BATCH_SIZE": "64", "CONVEYOR_LIMITS_MAX_BATCH_BYTES": str(64 << 20),
    "CONVEYOR_LIMITS_MAX_EXTENT": "2048", "CONVEYOR_LIMITS_MAX_IMAGE_PIXELS": "1000000",
    "CONVEYOR_LIMITS_MAX_PREFETCH_DEPTH": "4", "CONVEYOR_LIMITS_MAX_THREADS": "4",
    "CONVEYOR_LIMITS_MAX_PIPELINES": "32"}
#: Every answer, a whole batch included, must come within this.
TIMEOUT = 30.0


class Tally:
    """Answers by status code; a forbidden code fails the example that got it."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def record(self, method: str, code: grpc.StatusCode, what: object) -> None:
        self.counts[code.name] += 1
        assert code not in FORBIDDEN, f"{method} answered {code.name} to {str(what)[:2000]}"

    def report(self, label: str, server: ServerProcess,
               capsys: pytest.CaptureFixture[str]) -> None:
        codes = ", ".join(f"{code} {n}" for code, n in self.counts.most_common())
        with capsys.disabled():
            print(f"\n{label}: {sum(self.counts.values())} messages (seed {FUZZ_SEED}): "
                  f"{codes}; server peak RSS {peak_rss_mib(server):.0f} MiB")


def fuzz_settings(share: float) -> Callable[[Any], Any]:
    examples = max(1, round(FUZZ_MESSAGES * share))
    return settings(max_examples=examples, deadline=None, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


def peak_rss_mib(server: ServerProcess) -> float:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(x.split()[1] for x in status.splitlines() if x.startswith("VmHWM:"))) / 1024


@pytest.fixture
def fuzz_server(start_server: Start) -> ServerProcess:
    return start_server(env=FUZZ_LIMITS)


@pytest.fixture
def channel(fuzz_server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(fuzz_server.address) as ch:
        yield ch


def live_pipeline(server: ServerProcess, image_root: Path) -> tuple[list[str], list[bytes],
                                                                      checkpoint_pb2.CheckpointBody]:
    """A pipeline ``live`` on ``server`` with two checkpoints: their ids, blobs and body."""
    with client(server) as c:
        pipe = c.create("live", rotate_pipeline(str(image_root / "imgs"), batch_size=2))
        saved = []
        for _ in range(2):
            pipe.run()
            saved.append(pipe.checkpoint())
        pipe.close()
    return [s.id for s in saved], [s.data for s in saved], ckpt.open_blob(saved[0].data)


def stream_one_batch(channel: grpc.Channel, name: str, tally: Tally) -> None:
    request = service_pb2.StreamBatchesRequest(name=name)
    tally.record("StreamBatches", call(channel, "StreamBatches", True,
                                       request.SerializeToString(), TIMEOUT), request)


def delete(channel: grpc.Channel, name: str) -> None:
    request = service_pb2.DeletePipelineRequest(name=name, force=True)
    call(channel, "DeletePipeline", False, request.SerializeToString(), TIMEOUT)


def assert_serving(server: ServerProcess, image_root: Path) -> None:
    """SERVING, and a normal pipeline streams exactly what it does in process."""
    with grpc.insecure_channel(server.address) as ch:
        assert health_status(ch, "", TIMEOUT) == SERVING
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    with client(server) as c:
        for info in c.pipelines():
            c.delete(info.name, force=True)
        pipe = c.create("after-the-fuzz", spec)
        remote = [pipe.run() for _ in range(2)]
        pipe.close()
    with Pipeline(spec) as local:
        assert [batch_bytes(b) for b in run_batches(local, 2)] == \
            [batch_bytes(b) for b in remote]


def test_fuzzed_specs_never_answer_internal(fuzz_server: ServerProcess, channel: grpc.Channel,
                                            image_root: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    tally = Tally()

    @fuzz_settings(0.35)
    @seed(FUZZ_SEED)
    @given(specs(str(image_root / "imgs")))
    def create_and_stream(spec: Any) -> None:
        request = service_pb2.CreatePipelineRequest(name="fuzz", spec=spec)
        code = call(channel, "CreatePipeline", False, request.SerializeToString(), TIMEOUT)
        tally.record("CreatePipeline", code, spec)
        if code == grpc.StatusCode.OK:
            stream_one_batch(channel, "fuzz", tally)
            delete(channel, "fuzz")

    create_and_stream()
    assert_serving(fuzz_server, image_root)
    tally.report("fuzzed specs", fuzz_server, capsys)


def test_fuzzed_requests_never_answer_internal(fuzz_server: ServerProcess,
                                               channel: grpc.Channel, image_root: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    ids, blobs, body = live_pipeline(fuzz_server, image_root)
    tally = Tally()

    @fuzz_settings(0.35)
    @seed(FUZZ_SEED)
    @given(requests(str(image_root / "imgs"), ids, blobs, body))
    def send(message: tuple[str, Any]) -> None:
        method, request = message
        code = call(channel, method, method == "StreamBatches", request.SerializeToString(),
                    TIMEOUT)
        tally.record(method, code, request)
        if code == grpc.StatusCode.OK and method in ("CreatePipeline", "Restore"):
            stream_one_batch(channel, request.name, tally)
            if request.name != "live":
                delete(channel, request.name)

    send()
    assert_serving(fuzz_server, image_root)
    tally.report("fuzzed requests", fuzz_server, capsys)


def test_random_bytes_to_every_method_never_answer_internal(
        fuzz_server: ServerProcess, channel: grpc.Channel, image_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    ids, blobs, _ = live_pipeline(fuzz_server, image_root)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2).spec
    sv = service_pb2
    valid = [m.SerializeToString() for m in (
        sv.CreatePipelineRequest(name="raw", spec=spec), sv.RestoreRequest(name="raw",
                                                                           data=blobs[0]),
        sv.RestoreRequest(name="raw", checkpoint_id=ids[0]), sv.StreamBatchesRequest(name="live"),
        sv.CheckpointRequest(name="live", consumed=1), sv.GetCheckpointRequest(id=ids[1]))]
    tally = Tally()

    @fuzz_settings(0.3)
    @seed(FUZZ_SEED)
    @given(st.sampled_from(METHODS), raw_bodies(valid))
    def send(method: tuple[str, bool], body: bytes) -> None:
        name, streaming = method
        tally.record(name, call(channel, name, streaming, body, TIMEOUT), body)

    send()
    assert_serving(fuzz_server, image_root)
    tally.report("random request bodies", fuzz_server, capsys)


# -- damaged checkpoints ------------------------------------------------------------------


def _content(blob: bytes) -> tuple[int, bytes, bytes] | None:
    """What a blob holds as a SealedCheckpoint, or None if it does not parse as one."""
    try:
        sealed = checkpoint_pb2.SealedCheckpoint.FromString(blob)
    except Exception:
        return None
    return sealed.format_version, sealed.body, sealed.sha256


def damaged(first: bytes, second: bytes, count: int, rng: random.Random) -> list[bytes]:
    """``count`` blobs made from two real checkpoints by bit flips, truncations and
    splices, leaving out any that still encode one of them intact (a splice can repeat a
    whole field, which protobuf reads as the same message)."""
    intact = {_content(first), _content(second)}
    out: list[bytes] = []
    while len(out) < count:
        kind = len(out) % 3
        if kind == 0:
            flipped = bytearray(first)
            for _ in range(rng.randint(1, 8)):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            blob = bytes(flipped)
        elif kind == 1:
            blob = first[:rng.randrange(len(first))]
        else:
            a, b = rng.choice((first, second)), rng.choice((first, second))
            blob = a[:rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1):]
        if _content(blob) not in intact:
            out.append(blob)
    return out


def test_damaged_checkpoints_are_data_loss_and_take_nothing_over(
        start_server: Start, image_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder, other = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(holder) as ch, client(other) as co:
        pipe = ch.create("victim", spec)
        saved = []
        for _ in range(2):
            pipe.run()
            saved.append(pipe.checkpoint().data)
        before = co.pipeline("victim")
        blobs = damaged(saved[0], saved[1], FUZZ_CHECKPOINTS, random.Random(FUZZ_SEED))
        tally = Tally()
        with grpc.insecure_channel(other.address) as channel:
            for blob in blobs:
                request = service_pb2.RestoreRequest(name="victim", data=blob)
                tally.record("Restore", call(channel, "Restore", False,
                                             request.SerializeToString(), TIMEOUT), blob)
        assert tally.counts == {"DATA_LOSS": FUZZ_CHECKPOINTS}
        after = co.pipeline("victim")
        assert (after.holder, after.generation) == (holder.address, before.generation)
        assert [(p.name, p.holder) for p in co.pipelines()] == [("victim", holder.address)]
        third = pipe.run()  # the holder streams on, exactly
        pipe.close()
    with Pipeline(spec) as local:
        assert batch_bytes(third) == batch_bytes(run_batches(local, 3)[2])
    tally.report("damaged checkpoints sent to Restore", other, capsys)
