"""The in-process engine: exact resume across reader configurations and operators,
invariance to threads and prefetch, O(1) restore, and refusals that name the difference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.errors import (
    CheckpointingDisabled,
    CheckpointMismatch,
    CorruptCheckpoint,
    DataFileError,
    DeviceUnavailable,
    SpecError,
)
from conveyor.v1 import checkpoint_pb2
from conveyor_server import Pipeline
from conveyor_server.engine import catalog
from conveyor_server.engine import pipeline as pipeline_module
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.identity.behaviour.measure import process_behaviour
from conveyor_server.engine.ops import registry
from tests.support.images import make_image_folder
from tests.support.resume import assert_resume_exact, assert_same_stream, batch_bytes, run_batches

N_FILES = 15


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("data") / "imgs", counts=(5, 4, 6))


@pipeline_def(batch_size=8, num_threads=4, seed=12, enable_checkpointing=True)
def rotate_pipeline(image_dir: str, **reader: Any) -> Any:
    jpegs, labels = fn.readers.file(file_root=image_dir, name="image_reader", **reader)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    angles = fn.random.uniform(range=(-30.0, 30.0))
    rotated = fn.rotate(images, angle=angles, fill_value=0)
    return rotated, labels, angles


def test_seed_notebook_scenario(data: Path) -> None:
    spec = rotate_pipeline(str(data), random_shuffle=True)
    with Pipeline(spec) as pipe:
        run_batches(pipe, 3)
        blob = pipe.checkpoint()
        ref_images, ref_labels, ref_angles = pipe.run()
    with Pipeline(spec, checkpoint=blob) as restored:
        images, labels, angles = restored.run()
    assert [int(t[0]) for t in labels] == [int(t[0]) for t in ref_labels]
    assert [float(a) for a in angles] == [float(a) for a in ref_angles]
    assert all(np.array_equal(a, b) for a, b in zip(images, ref_images, strict=True))
    assert len(blob) <= 1024, f"the seed pipeline's checkpoint is {len(blob)} bytes"
    # Output conventions as DALI: HWC uint8 images, (1,) int32 labels, () float32 angles.
    assert images.layout() == "HWC" and images.dtype == np.uint8 and images[0].ndim == 3
    assert labels[0].shape == (1,) and labels.dtype == np.int32
    assert angles[0].shape == () and angles.dtype == np.float32
    assert images.at(0).flags.writeable and labels.as_array().shape == (8, 1)


@dataclasses.dataclass(frozen=True)
class ReaderCase:
    name: str
    args: dict[str, Any]
    batch_size: int


def _reader_cases() -> list[ReaderCase]:
    cases = [
        ReaderCase("plain_b5", {}, 5),
        ReaderCase("plain_b4", {}, 4),
        ReaderCase("shuffle_b4", {"random_shuffle": True}, 4),
        ReaderCase("shuffle_pad_b4", {"random_shuffle": True, "pad_last_batch": True}, 4),
        ReaderCase("sae_b5", {"shuffle_after_epoch": True}, 5),
        ReaderCase("sae_b4_pad", {"shuffle_after_epoch": True, "pad_last_batch": True}, 4),
    ]
    for shard in range(3):
        for stick in (False, True):
            for pad in (False, True):
                for shuffle in (False, True):
                    args = {"num_shards": 3, "shard_id": shard, "stick_to_shard": stick,
                            "pad_last_batch": pad, "random_shuffle": shuffle}
                    name = f"s3_id{shard}{'_stick' if stick else ''}{'_pad' if pad else ''}" \
                           f"{'_shuf' if shuffle else ''}"
                    cases.append(ReaderCase(name, args, 2 if shard == 1 else 3))
    return cases


READER_CASES = _reader_cases()


@pytest.mark.parametrize("case", READER_CASES, ids=[c.name for c in READER_CASES])
def test_resume_is_exact_for_every_reader_configuration(data: Path, case: ReaderCase) -> None:
    spec = rotate_pipeline(str(data), batch_size=case.batch_size, **case.args)
    with Pipeline(spec) as probe:
        epoch_len = probe._plan.readers[0].stage.epoch_length(0)
    per_epoch = -(-epoch_len // case.batch_size)
    positions = sorted({0, 1, per_epoch - 1, per_epoch, 3 * per_epoch + 1})
    for before in positions:
        assert_resume_exact(spec, before, per_epoch + 2)


def _op_pipelines(root: str) -> dict[str, Any]:
    common: dict[str, Any] = {"batch_size": 4, "seed": 3, "enable_checkpointing": True}

    @pipeline_def(**common)
    def resize_crop_flip() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, output_type=types.BGR)
        images = fn.resize(images, resize_x=fn.random.uniform(range=(30.0, 60.0)), resize_y=32)
        images = fn.crop(images, crop=(24, 24), crop_pos_x=fn.random.uniform(range=(0.0, 1.0)))
        return fn.flip(images, horizontal=fn.random.coin_flip()), labels

    @pipeline_def(**common)
    def normalize() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, shuffle_after_epoch=True)
        images = fn.decoders.image(jpegs, output_type=types.GRAY)
        out = fn.crop_mirror_normalize(images, crop=(32, 32), mean=[128.0], std=[64.0],
                                       mirror=fn.random.coin_flip(probability=0.5))
        noise = fn.random.normal(stddev=3.0, shape=(2,))
        return out, fn.cast(labels, dtype=types.FLOAT), noise

    @pipeline_def(**common)
    def rotate_bbox() -> Any:
        jpegs, _ = fn.readers.file(file_root=root, num_shards=2, shard_id=1)
        images = fn.decoders.image(jpegs)
        angle = fn.random.uniform(values=[0.0, 45.0, 90.0])
        return fn.rotate(images, angle=angle, keep_size=False, interp_type=types.INTERP_NN), angle

    @pipeline_def(**common)
    def reduce_transform() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs)
        mean = fn.reductions.mean(images, axes=(0, 1))
        std = fn.reductions.std_dev(images, mean, axes=(0, 1))
        turn = fn.transforms.rotation(angle=fn.random.uniform(range=(-30.0, 30.0)),
                                      center=[16.0, 16.0])
        shift = fn.transforms.translation(offset=fn.random.uniform(range=(-4.0, 4.0),
                                                                   shape=(2,)))
        return fn.transforms.combine(turn, shift), mean, std, fn.reductions.max(images), labels

    return {"resize_crop_flip": resize_crop_flip, "normalize": normalize,
            "rotate_bbox": rotate_bbox, "reduce_transform": reduce_transform}


@pytest.mark.parametrize("name", ["resize_crop_flip", "normalize", "rotate_bbox",
                                  "reduce_transform"])
@pytest.mark.parametrize("before", [0, 2, 9])
def test_resume_is_exact_for_every_operator(data: Path, name: str, before: int) -> None:
    spec = _op_pipelines(str(data))[name]()
    assert_resume_exact(spec, before, 5)


@pytest.mark.parametrize(("threads", "depth"), [(1, 1), (4, 1), (1, 4), (4, 4), (2, 3)])
def test_stream_does_not_depend_on_threads_or_prefetch(
    data: Path, threads: int, depth: int
) -> None:
    base = rotate_pipeline(str(data), random_shuffle=True, batch_size=4)
    other = rotate_pipeline(str(data), random_shuffle=True, batch_size=4,
                            num_threads=threads, prefetch_queue_depth=depth)
    with Pipeline(base) as a, Pipeline(other) as b:
        assert_same_stream(run_batches(a, 9), run_batches(b, 9), f"{threads} threads, {depth} deep")
    assert ckpt.open_blob(Pipeline(other).checkpoint()).fingerprint == \
        ckpt.open_blob(Pipeline(base).checkpoint()).fingerprint


def _blob_at(pipe: Pipeline, batches: int) -> bytes:
    """A checkpoint at ``batches`` from the engine's own pure state function."""
    body = pipe.checkpoint_body(pipe.start_batches)
    del body.op_states[:]
    body.op_states.extend(pipe.states_at(batches))
    body.batches = batches
    return ckpt.seal(body)


def test_restore_far_ahead_does_the_same_work_as_at_zero(data: Path) -> None:
    spec = rotate_pipeline(str(data), random_shuffle=True, num_shards=3, shard_id=2)
    far = 10**6
    with Pipeline(spec) as pipe:
        blobs = {0: _blob_at(pipe, 0), far: _blob_at(pipe, far)}
    reads = {}
    firsts = {}
    for at, blob in blobs.items():
        with Pipeline(spec, checkpoint=blob) as restored:
            assert restored.files_read == 0, "restore read data files before the first batch"
            firsts[at] = restored.run()
            restored.wait_prefetched()
            reads[at] = restored.files_read
    assert reads[far] == reads[0] == spec.batch_size * spec.prefetch_queue_depth
    # The far state agrees with the one reached by a second hop from halfway.
    with Pipeline(spec, checkpoint=_blob_at(Pipeline(spec), far // 2)) as half:
        assert ckpt.open_blob(_blob_at(half, far)).op_states == \
            ckpt.open_blob(blobs[far]).op_states
        assert batch_bytes(Pipeline(spec, checkpoint=_blob_at(half, far)).run()) == \
            batch_bytes(firsts[far])


def test_checkpoint_refuses_a_different_spec_naming_it(data: Path) -> None:
    blob = Pipeline(rotate_pipeline(str(data))).checkpoint()
    with pytest.raises(CheckpointMismatch, match="seed: checkpoint has 12, pipeline has 13"):
        Pipeline(rotate_pipeline(str(data), seed=13), checkpoint=blob)

    @pipeline_def(batch_size=8, seed=12, enable_checkpointing=True)
    def other_fill(image_dir: str) -> Any:
        jpegs, labels = fn.readers.file(file_root=image_dir, name="image_reader")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        angles = fn.random.uniform(range=(-30.0, 30.0))
        return fn.rotate(images, angle=angles, fill_value=255), labels, angles

    with pytest.raises(CheckpointMismatch, match=r"op 3 \(rotate\) argument 'fill_value'"):
        Pipeline(other_fill(str(data)), checkpoint=blob)
    # Threads and prefetch do not affect the stream: accepted.
    Pipeline(rotate_pipeline(str(data), num_threads=1, prefetch_queue_depth=5), checkpoint=blob)


def test_checkpoint_refuses_a_changed_data_set(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(3, 3))
    spec = rotate_pipeline(str(root))
    blob = Pipeline(spec).checkpoint()
    (root / "class_1" / "img_000.jpg").rename(root / "class_1" / "img_009.jpg")
    with pytest.raises(CheckpointMismatch, match="reader 'image_reader' .*data set changed"):
        Pipeline(spec, checkpoint=blob)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage", "foreign"])
def test_corrupt_checkpoints_are_refused(data: Path, damage: str) -> None:
    spec = rotate_pipeline(str(data))
    blob = Pipeline(spec).checkpoint()
    damaged: bytes = {
        "truncate": lambda b: b[: len(b) // 2],
        "flip": lambda b: b[:-40] + bytes([b[-40] ^ 1]) + b[-39:],
        "empty": lambda b: b"",
        "garbage": lambda b: b"\xff" * 64,
        "foreign": lambda b: checkpoint_pb2.CheckpointBody(batches=3).SerializeToString(),
    }[damage](blob)
    with pytest.raises(CorruptCheckpoint):
        Pipeline(spec, checkpoint=damaged)


def test_checkpoint_without_enable_checkpointing_raises(data: Path) -> None:
    with (Pipeline(rotate_pipeline(str(data), enable_checkpointing=False)) as pipe,
          pytest.raises(CheckpointingDisabled)):
        pipe.checkpoint()


def test_a_checkpoint_is_the_deterministic_serialization_of_its_body(data: Path) -> None:
    """The blob is built from a cached constant part and the position's fields: the
    same bytes as sealing the whole body, at every position."""
    with Pipeline(rotate_pipeline(str(data), random_shuffle=True)) as pipe:
        run_batches(pipe, 5)
        for n in (0, 1, 3, 5):
            body = pipe.checkpoint_body(n)
            assert (body.batches, len(body.op_states)) == (n, len(pipe.states_at(n)))
            assert pipe.checkpoint(batches=n) == ckpt.seal(body)
            assert ckpt.open_blob(pipe.checkpoint(batches=n)) == body


def test_restore_from_checkpoint_alone_uses_its_spec(data: Path) -> None:
    spec = rotate_pipeline(str(data), random_shuffle=True)
    with Pipeline(spec) as pipe:
        run_batches(pipe, 2)
        blob = pipe.checkpoint()
        expected = pipe.run()
    assert batch_bytes(Pipeline(checkpoint=blob).run()) == batch_bytes(expected)


def test_corrupt_data_file_names_it_and_keeps_the_position(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(4, 4))
    spec = rotate_pipeline(str(root), batch_size=4)
    with Pipeline(spec) as clean:
        expected = run_batches(clean, 3)
    victim = root / "class_1" / "img_001.jpg"
    good = victim.read_bytes()
    victim.write_bytes(bytes(len(good)))  # same size, not an image
    with Pipeline(spec) as pipe:
        assert batch_bytes(pipe.run()) == batch_bytes(expected[0])
        with pytest.raises(DataFileError, match="img_001.jpg"):
            pipe.run()
        assert pipe.batches_returned == 1
        victim.write_bytes(good)
        assert_same_stream([pipe.run(), pipe.run()], expected[1:], "after the repair")


def test_gpu_decoder_is_refused_without_a_device(data: Path) -> None:
    @pipeline_def(batch_size=2, seed=1)
    def gpu(root: str) -> Any:
        jpegs, _ = fn.readers.file(file_root=root)
        return fn.decoders.image(jpegs, device="mixed")

    with pytest.raises(DeviceUnavailable, match="CUDA"):
        Pipeline(gpu(str(data)))


def test_argument_errors_name_op_argument_value_and_allowed() -> None:
    with pytest.raises(SpecError, match=r"rotate: argument 'keep_size': got 3, expected a bool"):
        @pipeline_def(batch_size=2, seed=1)
        def bad() -> Any:
            jpegs, _ = fn.readers.file(file_root="/x")
            return fn.rotate(fn.decoders.image(jpegs), angle=1.0, keep_size=3)
        bad()


def test_epoch_size_and_reader_meta(data: Path) -> None:
    spec = rotate_pipeline(str(data), num_shards=2, shard_id=1, pad_last_batch=True)
    with Pipeline(spec) as pipe:
        assert pipe.epoch_size("image_reader") == N_FILES
        meta = pipe.reader_meta("image_reader")
        assert meta["number_of_shards"] == 2 and meta["epoch_size_padded"] == 16


def _add_unseeded_op(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """A deliberately broken operator: noise from an unkeyed generator."""
    from conveyor.definition.schemas import registry as schema
    monkeypatch.setitem(schema.SCHEMAS, "test.unkeyed_noise",
                        schema.OpSchema(1, ("images",), {"seed": schema.Arg("int", default=-1)}))
    unkeyed = np.random.default_rng()

    def build(ctx: registry.OpContext) -> registry.SampleOp:
        def noisy(inputs: Any, targs: Any) -> tuple[np.ndarray, ...]:
            return (inputs[0] ^ unkeyed.integers(0, 2, size=inputs[0].shape, dtype=np.uint8),)
        return registry.SampleOp(noisy, ("HWC",))

    catalog.load()  # the built-in operators first
    monkeypatch.setitem(registry._BUILDERS, ("test.unkeyed_noise", registry.SAMPLE), build)
    # Give it a behaviour digest, so that checkpoints of it restore (and differ).
    measured = process_behaviour()
    with_noise = dataclasses.replace(
        measured, digests={**measured.digests, "test.unkeyed_noise@cpu": b"\1" * 12})
    monkeypatch.setattr(pipeline_module, "process_behaviour", lambda: with_noise)
    from conveyor.definition.graph import make_op
    return make_op("test.unkeyed_noise")


def test_the_resume_harness_catches_an_unkeyed_random_draw(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    noise = _add_unseeded_op(monkeypatch)

    @pipeline_def(batch_size=4, seed=1, enable_checkpointing=True)
    def leaky(root: str) -> Any:
        jpegs, labels = fn.readers.file(file_root=root)
        return noise(fn.decoders.image(jpegs)), labels

    with pytest.raises(AssertionError, match="differs"):
        assert_resume_exact(leaky(str(data)), 2, 3)


@pytest.mark.parametrize("threads", [1, 3])
def test_a_batch_reports_its_first_bad_sample_whatever_the_threads(tmp_path: Path,
                                                                   threads: int) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(8,))
    spec = rotate_pipeline(str(root), batch_size=8).spec
    spec.num_threads = threads
    # Without shuffling, sample i of batch 0 is img_00i: break samples 2 and 6.
    for i in (2, 6):
        (root / "class_0" / f"img_{i:03d}.jpg").write_bytes(b"\xff\xd8\xff broken")
    for _ in range(3):
        with Pipeline(spec) as pipe, pytest.raises(DataFileError, match="img_002.jpg"):
            pipe.run()


def test_opencv_threads_change_nothing_but_speed(tmp_path: Path) -> None:
    """The engine turns OpenCV's own threads off; the bytes must not depend on it. The
    images are large enough for OpenCV to split its calls over threads."""
    import cv2

    root = make_image_folder(tmp_path / "big", counts=(3, 2), size=(405, 470))
    spec = rotate_pipeline(str(root), batch_size=5)
    resized = seed_with_resize(str(root))
    outputs = {}
    try:
        for threads in (4, 1):
            with Pipeline(spec) as pipe, Pipeline(resized) as other:
                cv2.setNumThreads(threads)  # after the engine set its own
                assert cv2.getNumThreads() == threads
                outputs[threads] = (batch_bytes(pipe.run()), batch_bytes(other.run()))
    finally:
        cv2.setNumThreads(1)
    assert outputs[4] == outputs[1]


@pipeline_def(batch_size=5, num_threads=2, seed=3, enable_checkpointing=True)
def seed_with_resize(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    images = fn.decoders.image(jpegs, output_type=types.RGB)
    images = fn.rotate(images, angle=fn.random.uniform(range=(-30.0, 30.0)), fill_value=0,
                       keep_size=True)
    return fn.resize(images, size=(224, 224)), labels
