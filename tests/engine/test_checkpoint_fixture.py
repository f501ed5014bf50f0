"""Checkpoints written by earlier versions of the server.

``fixtures/before_rooms`` was written by commit 665ef8f: 12 committed JPEGs read by
relative path, a shuffled reader, a keyed uniform, rotate, resize and a mirrored, cropped
crop_mirror_normalize. It holds the checkpoints after batches 4 and 7 and the SHA-256 of
every output of batches 5-7 (dtype, shape and bytes of each sample). It predates behaviour
identities, so a server now refuses it, saying why.

``fixtures/behaviour_v1`` holds the same pipeline's checkpoints with ``verify="content"``
(a checkout's files have new modification times), written by the commit that introduced
behaviour identities. Restoring the first must give the same batches as the old fixture
recorded (the outputs did not change) and then checkpoint to the second, byte for byte
(save the CPU description, which is the machine's).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.definition import spec
from conveyor.errors import CheckpointMismatch
from conveyor.tensor_list import TensorList
from conveyor.v1 import pipeline_pb2
from conveyor_server import Pipeline
from conveyor_server.engine.identity.behaviour.measure import process_behaviour
from conveyor_server.engine.identity.checkpoint import open_blob

FIXTURES = Path(__file__).parent / "fixtures"
DATA = FIXTURES / "before_rooms"
FILES = [f"imgs/img_{i:02d}.jpg" for i in range(12)]
LABELS = [i % 3 for i in range(12)]


def fixture_pipeline(verify: str | None = None) -> pipeline_pb2.PipelineSpec:
    reader_args = {"verify": verify} if verify else {}

    @pipeline_def(batch_size=4, num_threads=2, seed=21, enable_checkpointing=True)
    def fixture_pipeline() -> object:
        jpegs, labels = fn.readers.file(files=FILES, labels=LABELS, random_shuffle=True,
                                        name="reader", **reader_args)
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        angles = fn.random.uniform(range=(-30.0, 30.0))
        rotated = fn.rotate(images, angle=angles, fill_value=0)
        small = fn.resize(rotated, size=(32, 32))
        normalized = fn.crop_mirror_normalize(small, crop=(24, 24),
                                              mean=[120.0, 115.0, 100.0],
                                              std=[60.0, 58.0, 57.0],
                                              mirror=fn.random.coin_flip(),
                                              output_layout="CHW")
        return rotated, normalized, labels, angles

    built = fixture_pipeline().spec
    assert isinstance(built, pipeline_pb2.PipelineSpec)
    return built


def _digest(output: TensorList) -> str:
    h = hashlib.sha256()
    for sample in output:
        h.update(f"{sample.dtype} {sample.shape}\n".encode())
        h.update(np.ascontiguousarray(sample).tobytes())
    return h.hexdigest()


def test_a_checkpoint_from_before_behaviour_identities_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)  # the reader's paths are relative to the fixture
    blob = (DATA / "at_batch_4.ckpt").read_bytes()
    assert spec.first_difference(open_blob(blob).spec, fixture_pipeline()) is None
    with pytest.raises(CheckpointMismatch, match="from before behaviour identities"):
        Pipeline(fixture_pipeline(), checkpoint=blob)


def test_a_checkpoint_from_an_earlier_version_restores_byte_exact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DATA)
    here = FIXTURES / "behaviour_v1"
    blob = (here / "at_batch_4.ckpt").read_bytes()
    body = open_blob(blob)
    digests = process_behaviour().digests
    differ = [b.key for b in body.engine.ops if digests.get(b.key) != b.digest]
    if differ:
        pytest.skip(f"this machine computes other bytes for {differ} than the fixture's "
                    f"({body.engine.cpu}): restore refuses it (tested in test_behaviour)")
    assert spec.first_difference(body.spec, fixture_pipeline("content")) is None
    expected = json.loads((DATA / "expected.json").read_text())["after_batch_4"]
    with Pipeline(fixture_pipeline("content"), checkpoint=blob) as pipe:
        assert pipe.batches_returned == 4
        for want in expected:
            assert [_digest(output) for output in pipe.run()] == want
        after = open_blob(pipe.checkpoint())
    want_after = open_blob((here / "at_batch_7.ckpt").read_bytes())
    after.engine.cpu = want_after.engine.cpu
    assert after == want_after
