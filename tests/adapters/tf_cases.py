"""``conveyor.tf.ConveyorDataset`` against real servers and a real Redis: the client's own
bytes as TensorFlow tensors (dtype kept, ragged where samples differ in shape), a position
that ``tf.train.Checkpoint`` saves mid-epoch and restores into a fresh dataset, in this
process and in a fresh one after the first server died, through ``prefetch``, in a ``for``
loop and under ``model.fit``. Run by ``test_tf_adapter.py`` in a process of its own.

TensorFlow is part of the test environment (``make test`` installs it): without it this
module fails. ``CONVEYOR_SKIP_TENSORFLOW_TESTS=1`` skips it, saying so in the summary."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if os.environ.get("CONVEYOR_SKIP_TENSORFLOW_TESTS") == "1":
    pytest.skip("CONVEYOR_SKIP_TENSORFLOW_TESTS=1: the TensorFlow adapter is NOT tested in "
                "this run", allow_module_level=True)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # after the opt-out: missing, this module fails

from conveyor import TensorList, errors, fn, pipeline_def, types
from conveyor.tf import ConveyorDataset
from conveyor.tf.tensors import signature_of, value_of
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import reference
from tests.support.servers import Start

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = {"timeout": 10}


@pipeline_def(batch_size=4, num_threads=2, seed=5, enable_checkpointing=True)
def half_crops(root: str) -> Any:
    """Uniform float16 crops and int32 labels: dense tensors a model can fit on."""
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    crops = fn.crop_mirror_normalize(images, crop=(16, 16), mean=[128.0], std=[64.0],
                                     dtype=types.FLOAT16, output_layout="HWC",
                                     mirror=fn.random.coin_flip())
    return crops, labels


def samples(value: Any) -> list[Any]:
    """A batch's samples as numpy arrays (a ragged sample made dense: padding, if any,
    would change its shape and bytes)."""
    if isinstance(value, tf.RaggedTensor):
        return [(row.to_tensor() if isinstance(row, tf.RaggedTensor) else row).numpy()
                for row in value]
    return list(value.numpy())


def element_bytes(element: tuple[Any, ...]) -> list[list[tuple[str, tuple[int, ...], bytes]]]:
    """``tests.support.resume.batch_bytes`` of one element of the dataset."""
    return [[(str(s.dtype), s.shape, s.tobytes()) for s in samples(out)] for out in element]


def checkpoint_bytes(prefix: str) -> int:
    directory = Path(prefix).parent
    return sum(p.stat().st_size for p in directory.iterdir()
               if p.name.startswith(Path(prefix).name) or p.name == "checkpoint")


def test_bytes_and_a_checkpoint_through_prefetch_resume_in_a_fresh_process(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 6)
    dataset = ConveyorDataset([a.address, b.address], "tf-train", spec, run_id="r1",
                              client_options=OPTIONS)
    assert isinstance(dataset, tf.data.Dataset) and dataset.start == 0
    images, labels, angles = dataset.element_spec
    assert isinstance(images, tf.RaggedTensorSpec) and images.dtype == tf.uint8
    assert images.shape.as_list() == [None, None, None, 3]  # rotated: sizes differ
    assert labels.dtype == tf.int32 and angles.dtype == tf.float32

    iterator = iter(dataset.prefetch(3))
    got = [element_bytes(next(iterator)) for _ in range(3)]
    assert got == expected[:3]
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "tf" / "ckpt"))
    assert element_bytes(next(iterator)) == expected[3]  # taken after the save
    one_batch = sum(len(s[2]) for out in expected[0] for s in out)
    assert checkpoint_bytes(saved) < one_batch, "the position is saved, not the prefetched"
    dataset.close()

    a.kill()  # the trainer restarts in a new process, finds A gone, restores its checkpoint
    child = subprocess.run(
        [sys.executable, "-c", "import sys; "
         "from tests.adapters.tf_cases import resume_child; "
         "resume_child(*sys.argv[1:])", b.address, a.address, str(image_root), saved],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert child.returncode == 0, child.stderr[-3000:]
    resumed = json.loads(child.stdout.strip().splitlines()[-1])
    assert resumed == [[[[d, list(shape), data.hex()] for d, shape, data in out]
                        for out in batch] for batch in expected[3:6]]


def resume_child(server: str, dead: str, image_root: str, saved: str) -> None:
    """In a fresh process: a fresh dataset, its iterator restored from ``saved``; prints the
    next three batches as JSON."""
    spec = rotate_pipeline(str(Path(image_root) / "imgs"), batch_size=3)
    dataset = ConveyorDataset([dead, server], "tf-train", spec, run_id="r1",
                              client_options=OPTIONS)
    iterator = iter(dataset.prefetch(3))
    tf.train.Checkpoint(iterator=iterator).restore(saved).assert_consumed()
    batches = [element_bytes(next(iterator)) for _ in range(3)]
    dataset.close()
    print(json.dumps([[[[d, list(shape), data.hex()] for d, shape, data in out]
                       for out in batch] for batch in batches]))


def test_a_checkpointed_dataset_goes_on_in_a_for_loop_and_feeds_model_fit(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    server = start_server()
    spec = half_crops(str(image_root / "imgs"))
    expected = reference(spec, 7)
    dataset = ConveyorDataset(server.address, "tf-fit", spec, run_id="fit",
                              client_options=OPTIONS)
    crops, labels = dataset.element_spec
    assert crops == tf.TensorSpec([None, 16, 16, 3], tf.float16)
    assert labels.dtype == tf.int32
    checkpoint = tf.train.Checkpoint(dataset=dataset)
    got = []
    for step, element in enumerate(dataset):  # as a training loop iterates
        assert element[0].dtype == tf.float16 and element[0].shape == (4, 16, 16, 3)
        got.append(element_bytes(element))
        if step == 2:
            saved = checkpoint.save(str(tmp_path / "loop" / "ckpt"))  # after 3 batches
        if step == 4:
            break
    assert got == expected[:5]
    dataset.close()

    again = ConveyorDataset(server.address, "tf-fit", spec, run_id="fit",
                            client_options=OPTIONS)
    tf.train.Checkpoint(dataset=again).restore(saved).assert_consumed()
    assert [element_bytes(e) for e in itertools.islice(again, 4)] == expected[3:7]
    # Iterating again starts at the dataset's start, as a tf.data.Dataset does.
    assert element_bytes(next(iter(again))) == expected[again.start]

    model = tf.keras.Sequential([tf.keras.layers.Input((16, 16, 3)),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(6)])
    model.compile(optimizer="sgd",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(again.map(lambda x, y: (tf.cast(x, tf.float32), y)).prefetch(2),
                        steps_per_epoch=3, epochs=2, shuffle=False, verbose=0)
    assert len(history.history["loss"]) == 2
    again.close()


def test_signatures_that_do_not_fit_the_stream_are_refused(start_server: Start,
                                                           image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    dense = (tf.TensorSpec([None, None, None, 3], tf.uint8), tf.TensorSpec([None, 1], tf.int32),
             tf.TensorSpec([None, 1], tf.float32))
    dataset = ConveyorDataset(server.address, "tf-dense", spec, output_signature=dense,
                              client_options=OPTIONS)
    with pytest.raises(tf.errors.OpError,  # (a Python error in tf.data: UnknownError)
                       match=r"output 0 of batch 0 of 'tf-dense' has samples of different "
                             r"shapes .* tf.RaggedTensorSpec"):
        next(iter(dataset))
    dataset.close()
    with pytest.raises(errors.InvalidArgument, match=r"output_signature\[1\]"):
        ConveyorDataset(server.address, "tf-dense", spec, output_signature=(dense[0], 3),
                        client_options=OPTIONS)


def test_outputs_whose_samples_differ_are_ragged_in_those_dimensions() -> None:
    rng = np.random.default_rng(3)
    cases: list[tuple[list[tuple[int, ...]], list[int | None], int]] = [
        # sample shapes -> the spec read from them
        ([(2,), (3,), (0,)], [None, None], 1),
        ([(2, 4, 3), (2, 5, 3)], [None, None, None, 3], 2),
        ([(4, 2), (1, 2), (2, 2)], [None, None, 2], 1),
    ]
    for shapes, spec_shape, ragged_rank in cases:
        out = TensorList([rng.integers(0, 255, s).astype(np.uint8) for s in shapes])
        (spec,) = signature_of([out])
        assert isinstance(spec, tf.RaggedTensorSpec) and spec.dtype == tf.uint8
        assert spec.shape.as_list() == spec_shape and spec.ragged_rank == ragged_rank
        for splits in (tf.int64, tf.int32):
            given = tf.RaggedTensorSpec(spec.shape, tf.uint8, ragged_rank,
                                        row_splits_dtype=splits)
            value = value_of(out, given, "output 0")
            assert value.row_splits.dtype == splits
            assert element_bytes((value,)) == [[(str(s.dtype), s.shape, s.tobytes())
                                                for s in out]]
    dense = TensorList([np.ones((2, 3), np.float16)] * 4)
    assert signature_of([dense]) == (tf.TensorSpec([None, 2, 3], tf.float16),)
    with pytest.raises(errors.InvalidArgument, match=r"output 0 has shape \(4, 2, 3\), its "
                       r"signature says \(None, 2, 2\)"):
        value_of(dense, tf.TensorSpec([None, 2, 2], tf.float16), "output 0")
    with pytest.raises(errors.InvalidArgument, match="output 0 is float16, its signature "
                       "says float32"):
        value_of(dense, tf.TensorSpec([None, 2, 3], tf.float32), "output 0")


def test_the_ranks_of_a_job_take_their_shares_and_resume_from_a_checkpoint(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 8)  # the one-rank sequence: step s is batches 2s and 2s + 1
    ranks = [ConveyorDataset([a.address, b.address][r:] + [a.address, b.address][:r], "job",
                             spec, run_id="j", rank=r, world_size=2, client_options=OPTIONS)
             for r in range(2)]
    iterators = [iter(d.prefetch(2)) for d in ranks]
    got = [[element_bytes(next(it)) for it in iterators] for _ in range(2)]
    assert got == [[expected[0], expected[1]], [expected[2], expected[3]]]
    saved = [tf.train.Checkpoint(data=it).save(str(tmp_path / f"rank{r}" / "ckpt"))
             for r, it in enumerate(iterators)]  # both at step 2
    for dataset in ranks:
        dataset.close()

    again = [ConveyorDataset([a.address, b.address], "job", spec, run_id="j", rank=r,
                             world_size=2, client_options=OPTIONS) for r in range(2)]
    restored = [iter(d.prefetch(2)) for d in again]
    for it, path in zip(restored, saved, strict=True):
        tf.train.Checkpoint(data=it).restore(path).assert_consumed()
    assert [element_bytes(next(it)) for it in restored] == [expected[4], expected[5]]
    for dataset in again:
        dataset.close()


def test_a_dataset_checkpoint_after_its_loop_ended_holds_where_the_loop_stopped(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    """Saved at the end of an epoch whose ``for`` loop ended with ``break`` (its iterator
    gone), the dataset's checkpoint is where the loop stopped, not the dataset's start; a
    dataset iterated only through ``prefetch`` refuses to save a position it does not know.

    The dataset keeps that iterator until it is closed; then only its position is kept (a
    checkpoint of the closed dataset saves it), and the iterator goes with its last
    reference, not with a garbage collection (it refers to the dataset), which might come
    only as the interpreter exits, where TensorFlow's teardown of an iterator can wait up to
    a minute."""
    server = start_server()
    spec = half_crops(str(image_root / "imgs"))
    expected = reference(spec, 6)
    dataset = ConveyorDataset(server.address, "tf-epoch", spec, run_id="e",
                              client_options=OPTIONS)
    for step, _ in enumerate(dataset):
        if step == 2:
            break  # 3 batches taken
    newest = weakref.ref(dataset._newest)
    dataset.close()
    assert newest() is None
    saved = tf.train.Checkpoint(dataset=dataset).save(str(tmp_path / "epoch" / "ckpt"))
    again = ConveyorDataset(server.address, "tf-epoch", spec, run_id="e",
                            client_options=OPTIONS)
    tf.train.Checkpoint(dataset=again).restore(saved).assert_consumed()
    for step, element in enumerate(again):
        assert element_bytes(element) == expected[3 + step]
        if step == 1:
            break
    resaved = tf.train.Checkpoint(dataset=again).save(str(tmp_path / "again" / "ckpt"))
    again.close()

    third = ConveyorDataset(server.address, "tf-epoch", spec, run_id="e",
                            client_options=OPTIONS)
    restore = tf.train.Checkpoint(dataset=third).restore
    restore(resaved).assert_consumed()
    # A dataset made from it starts at the dataset's start, not at the restored position.
    with pytest.raises(tf.errors.OpError, match=r"was restored from a checkpoint.*batch 0"):
        next(iter(third.prefetch(2)))
    restore(resaved).assert_consumed()
    assert element_bytes(next(iter(third))) == expected[5]
    third.close()

    fourth = ConveyorDataset(server.address, "tf-epoch", spec, run_id="e",
                             client_options=OPTIONS)
    assert element_bytes(next(iter(fourth.prefetch(2)))) == expected[fourth.start]
    with pytest.raises(errors.FailedPrecondition, match=r"tf.train.Checkpoint\(iterator="):
        tf.train.Checkpoint(dataset=fourth).save(str(tmp_path / "derived" / "ckpt"))
    fourth.close()


def test_an_iterator_that_outlived_its_closed_dataset_takes_no_stream_over(
        start_server: Start, image_root: Path) -> None:
    """tf.data computes batches ahead on threads of its own, so a ``for`` loop's iterator
    still asks for the next batch after its ``break``, even after ``close()``. Such a
    request must not open the pipeline again: the trainer's next dataset on the pipeline
    would lose its stream (ABORTED, "a newer consumer took over", or fenced by the stale
    restore). Here the old iterator asks in the open, after the next dataset began
    streaming: served, it would end that dataset's stream."""
    server = start_server()
    spec = half_crops(str(image_root / "imgs"))
    expected = reference(spec, 8)
    dataset = ConveyorDataset(server.address, "tf-closed", spec, run_id="c",
                              client_options=OPTIONS)
    outlived = iter(dataset)
    assert element_bytes(next(outlived)) == expected[0]
    dataset.close()

    again = ConveyorDataset(server.address, "tf-closed", spec, run_id="c",
                            client_options=OPTIONS)
    current = iter(again)
    assert element_bytes(next(current)) == expected[again.start]
    with pytest.raises(tf.errors.OpError, match=r"'tf-closed' was closed .*batch \d+ is not "
                                                r"read.*make a new ConveyorDataset"):
        for _ in range(20):  # what was computed ahead before the close, then the refusal
            next(outlived)
    assert [element_bytes(next(current)) for _ in range(3)] == \
        expected[again.start + 1:again.start + 4]
    again.close()
