"""A data-parallel job's ranks in the engine: rank r of N produces global batches
k*N + r, the one-rank pipeline's batches; a checkpoint of any rank holds the job's cut,
from which any world size goes on in O(1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import InvalidArgument
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.pipeline import Pipeline
from conveyor_server.engine.stages.job_share import Share
from tests.engine.test_train_ops_engine import train_ops
from tests.support.resume import batch_bytes, reference


def steps(pipes: list[Pipeline], count: int) -> list[list[object]]:
    """``count`` steps of every rank, each step's batches in rank order."""
    return [[batch_bytes(p.run()) for p in pipes] for _ in range(count)]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ranks_of_a_job_concatenate_to_the_one_rank_sequence(image_root: Path,
                                                             world: int) -> None:
    # 18 images, batches of 2: an epoch is 9 batches, so steps straddle epoch boundaries.
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 5 * world)
    pipes = [Pipeline(spec, share=Share("job", r, world, 1)) for r in range(world)]
    try:
        got = steps(pipes, 5)
    finally:
        for p in pipes:
            p.close()
    assert [b for step in got for b in step] == expected


def test_a_cut_goes_on_with_another_world_size(image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 4 * 3 + 3 * 4)
    four = [Pipeline(spec, share=Share("job", r, 4, 1)) for r in range(4)]
    first = steps(four, 3)
    blobs = [p.checkpoint() for p in four]  # after step 3: every rank's cut is global 12
    for p in four:
        p.close()
    bodies = [ckpt.open_blob(b) for b in blobs]
    assert {tuple(b.op_states) == tuple(bodies[0].op_states) for b in bodies} == {True}
    assert [(b.batches, b.job.global_batches, b.job.rank) for b in bodies] == [
        (3, 12, r) for r in range(4)]
    # Three ranks go on from rank 2's checkpoint: step 3 is global batch 12.
    three = [Pipeline(spec, blobs[2], share=Share("job", r, 3, 2, step=3, global_batches=12))
             for r in range(3)]
    later = steps(three, 4)
    for p in three:
        p.close()
    assert [b for step in first + later for b in step] == expected
    # A rank restored from its own checkpoint keeps its share.
    alone = Pipeline(spec, blobs[1])
    assert alone.share == Share("job", 1, 4, 1, step=3, global_batches=12)
    assert batch_bytes(alone.run()) == expected[13]
    alone.seek(5)  # step 5 of rank 1 of 4: global batch 21, in O(1)
    assert batch_bytes(alone.run()) == expected[21]
    alone.close()


def test_a_start_before_the_checkpoint_or_outside_the_world_is_refused(
        image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with Pipeline(spec, share=Share("job", 0, 2, 1)) as p:
        p.run(), p.run()
        blob = p.checkpoint()
    with pytest.raises(InvalidArgument, match="before the checkpoint"):
        Pipeline(spec, blob, share=Share("job", 0, 2, 1, step=1, global_batches=1))
    with pytest.raises(InvalidArgument, match="rank 3 is not in 0..1"):
        Share("job", 3, 2)


def reader_spec(root: str, batch_size: int, **reader: Any) -> Any:
    @pipeline_def(batch_size=batch_size, seed=5, enable_checkpointing=True)
    def pipeline() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, **reader)
        images = fn.resize(fn.decoders.image(jpegs), size=(8, 8))
        return images, labels, fn.random.uniform(range=(0.0, 1.0))

    return pipeline()


CONFIGURATIONS: dict[str, tuple[int, dict[str, Any]]] = {
    "pad_last_batch": (4, {"random_shuffle": True, "pad_last_batch": True}),
    "shuffle_after_epoch": (5, {"shuffle_after_epoch": True}),
    "shards_rotating": (2, {"num_shards": 3, "shard_id": 1, "random_shuffle": True}),
    "shards_padded": (3, {"num_shards": 3, "shard_id": 2, "stick_to_shard": True,
                          "pad_last_batch": True}),
}


def assert_three_then_two_ranks_are_one(spec: Any) -> None:
    """Four steps of three ranks, a resize to two from rank 1's checkpoint, three steps:
    the one-rank pipeline's 18 batches."""
    expected = reference(spec, 3 * 4 + 2 * 3)
    three = [Pipeline(spec, share=Share("job", r, 3, 1)) for r in range(3)]
    got = steps(three, 4)
    blob = three[1].checkpoint()
    for p in three:
        p.close()
    two = [Pipeline(spec, blob, share=Share("job", r, 2, 2, step=4, global_batches=12))
           for r in range(2)]
    got += steps(two, 3)
    for p in two:
        p.close()
    assert [b for step in got for b in step] == expected


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_every_reader_order_splits_among_ranks(image_root: Path, name: str) -> None:
    """Epoch boundaries, padding and shard rotation fall where they fall for one rank."""
    batch_size, reader = CONFIGURATIONS[name]
    assert_three_then_two_ranks_are_one(reader_spec(str(image_root / "imgs"), batch_size,
                                                    **reader))


def test_keyed_random_windows_split_among_ranks(image_root: Path) -> None:
    """Operators drawing by global sample index (random crops, colour factors)."""
    assert_three_then_two_ranks_are_one(train_ops(str(image_root / "imgs")))
