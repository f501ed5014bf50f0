"""A checkpoint written by an earlier version of the server restores byte-exact.

``fixtures/before_rooms`` was written by commit 665ef8f, before the server was split into
rooms (engine, service, store, app): 12 committed JPEGs read by relative path, a shuffled
reader, a keyed uniform, rotate, resize and a mirrored, cropped crop_mirror_normalize. It
holds the checkpoints after batches 4 and 7 and the SHA-256 of every output of batches 5-7
(dtype, shape and bytes of each sample). Restoring the first must give those batches and
then checkpoint to the second, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from conveyor import fn, pipeline_def, spec, types
from conveyor.tensor_list import TensorList
from conveyor_server import Pipeline
from conveyor_server.engine.checkpoint import open_blob
from conveyor_server.engine.engine_id import engine_id

FIXTURE = Path(__file__).parent / "fixtures" / "before_rooms"
FILES = [f"imgs/img_{i:02d}.jpg" for i in range(12)]
LABELS = [i % 3 for i in range(12)]


@pipeline_def(batch_size=4, num_threads=2, seed=21, enable_checkpointing=True)
def fixture_pipeline() -> object:
    jpegs, labels = fn.readers.file(files=FILES, labels=LABELS, random_shuffle=True,
                                    name="reader")
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    angles = fn.random.uniform(range=(-30.0, 30.0))
    rotated = fn.rotate(images, angle=angles, fill_value=0)
    small = fn.resize(rotated, size=(32, 32))
    normalized = fn.crop_mirror_normalize(small, crop=(24, 24), mean=[120.0, 115.0, 100.0],
                                          std=[60.0, 58.0, 57.0],
                                          mirror=fn.random.coin_flip(), output_layout="CHW")
    return rotated, normalized, labels, angles


def _digest(output: TensorList) -> str:
    h = hashlib.sha256()
    for sample in output:
        h.update(f"{sample.dtype} {sample.shape}\n".encode())
        h.update(np.ascontiguousarray(sample).tobytes())
    return h.hexdigest()


def test_a_checkpoint_from_before_the_rooms_restores_byte_exact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURE)  # the reader's paths are relative to the fixture
    blob = (FIXTURE / "at_batch_4.ckpt").read_bytes()
    body = open_blob(blob)
    if body.engine != engine_id():
        pytest.skip(f"the fixture was written by engine {body.engine}; this one is "
                    f"{engine_id()}: restore refuses it (tested in test_engine)")
    # The definition API still builds the spec the checkpoint carries.
    assert spec.first_difference(body.spec, fixture_pipeline()) is None
    expected = json.loads((FIXTURE / "expected.json").read_text())["after_batch_4"]
    with Pipeline(fixture_pipeline(), checkpoint=blob) as pipe:
        assert pipe.batches_returned == 4
        for want in expected:
            assert [_digest(output) for output in pipe.run()] == want
        assert pipe.checkpoint() == (FIXTURE / "at_batch_7.ckpt").read_bytes()
