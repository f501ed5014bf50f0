"""Poison samples: ``on_error`` of the decoder and the reader. "skip" leaves a failed
sample out of its batch, "replace" puts the batch's next good sample in its place; both
are decided by the batch's position, so restores stay exact. The policy may change at a
restore, so one corrupt file does not stop a pipeline for ever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.definition import spec
from conveyor.errors import DataFileError
from conveyor_server import Pipeline
from tests.app.test_metrics import metric
from tests.support.images import make_image_folder
from tests.support.resume import assert_same_stream, batch_bytes, run_batches
from tests.support.servers import Start, client, wait_for

BATCH = 4


@pipeline_def(batch_size=BATCH, num_threads=2, seed=3, enable_checkpointing=True)
def poisoned(root: str, decode: str = "fail", read: str = "fail") -> Any:
    jpegs, labels = fn.readers.file(file_root=root, on_error=read, name="reader")
    images = fn.decoders.image(jpegs, output_type=types.RGB, on_error=decode)
    angles = fn.random.uniform(range=(-10.0, 10.0))
    return fn.rotate(images, angle=angles, fill_value=0), labels, angles


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """12 images; the 6th in reading order (batch 1, position 1) is not an image."""
    folder = make_image_folder(tmp_path / "imgs", counts=(12,))
    victim = sorted((folder / "class_0").iterdir())[5]
    victim.write_bytes(bytes(victim.stat().st_size))
    return folder


def test_skip_leaves_the_sample_out_and_resumes_exactly(root: Path) -> None:
    spec_ = poisoned(str(root), decode="skip")
    with Pipeline(spec_) as pipe:
        batches = run_batches(pipe, 4)
        assert [len(b[0]) for b in batches] == [4, 3, 4, 4]
        assert pipe.samples_skipped == 1 and pipe.samples_replaced == 0
    with Pipeline(spec_) as pipe:
        run_batches(pipe, 1)
        blob = pipe.checkpoint()
    with Pipeline(spec_, checkpoint=blob) as restored:
        assert_same_stream(run_batches(restored, 3), batches[1:], "after a restore")


def test_replace_takes_the_batchs_next_good_sample(root: Path) -> None:
    with Pipeline(poisoned(str(root), decode="replace")) as pipe:
        images, labels, angles = run_batches(pipe, 2)[1]
        assert len(images) == BATCH and pipe.samples_replaced == 1
        # Sample 1 of batch 1 is sample 2's image, label and angle.
        assert np.array_equal(images[1], images[2]) and int(labels[1][0]) == int(labels[2][0])
        assert float(angles[1]) == float(angles[2])
    with Pipeline(poisoned(str(root), decode="replace")) as again:
        assert batch_bytes(run_batches(again, 2)[1]) == batch_bytes((images, labels, angles))


def test_the_reader_skips_a_file_that_is_gone(tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "imgs", counts=(8,))
    with Pipeline(poisoned(str(folder), read="skip")) as pipe:
        sorted((folder / "class_0").iterdir())[0].unlink()
        assert [len(b[0]) for b in run_batches(pipe, 2)] == [3, 4]


def test_a_batch_with_no_good_sample_is_data_loss(tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "imgs", counts=(4,))
    for path in folder.rglob("*.jpg"):
        path.write_bytes(bytes(path.stat().st_size))
    with Pipeline(poisoned(str(folder), decode="skip")) as pipe, \
            pytest.raises(DataFileError, match="every sample of the batch failed"):
        pipe.run()


def test_a_stopped_pipeline_resumes_with_another_policy(root: Path) -> None:
    strict = poisoned(str(root))
    with Pipeline(strict) as pipe:
        run_batches(pipe, 1)
        with pytest.raises(DataFileError, match="decoders.image"):
            pipe.run()
        blob = pipe.checkpoint()
    lenient = poisoned(str(root), decode="skip")
    assert spec.first_difference(strict.spec, lenient.spec) is None  # the policy may change
    with Pipeline(lenient, checkpoint=blob) as resumed, Pipeline(lenient) as reference:
        assert_same_stream(run_batches(resumed, 2), run_batches(reference, 3)[1:])


def test_describe_and_metrics_count_failed_samples(start_server: Start, tmp_path: Path) -> None:
    folder = make_image_folder(tmp_path / "root" / "imgs", counts=(12,))
    victim = sorted((folder / "class_0").iterdir())[5]
    victim.write_bytes(bytes(victim.stat().st_size))
    server = start_server(roots=[tmp_path / "root"], metrics=True)
    with client(server) as c:
        pipe = c.create("poisoned", poisoned(str(folder), decode="skip"))
        assert [len(pipe.run()[0]) for _ in range(3)] == [4, 3, 4]
        pipe.close()
        wait_for(lambda: metric(server, "conveyor_active_streams") == 0, "the stream to end")
        info = c.pipeline("poisoned")
        # Counted in the batches the server made (those it ran ahead of the trainer too):
        # batch 1 of each epoch holds the bad file.
        assert info.samples_replaced == 0
        assert 1 <= info.samples_skipped <= sum(1 for i in range(info.produced) if i % 3 == 1)
        assert metric(server, "conveyor_samples_failed_total", policy="skip") == \
            info.samples_skipped
