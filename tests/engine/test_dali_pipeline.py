"""A DALI pipeline script runs as written: ``@pipeline_def`` gives a pipeline with DALI's
methods, a restore without a seed takes the checkpoint's, and ``conveyor.dali`` holds DALI's
names. The engine runs in process."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor_server
from conveyor import pipeline_def as conveyor_pipeline_def
from conveyor.dali import fn, pipeline_def, types
from conveyor.definition import spec as specs
from conveyor.definition.pipeline import Pipeline as DefinedPipeline
from conveyor.errors import FailedPrecondition, InvalidArgument, SpecMismatch
from conveyor.v1 import pipeline_pb2
from tests.support.images import make_image_folder
from tests.support.resume import Batch, batch_bytes, run_batches


def first_batches(pipe: DefinedPipeline, count: int) -> list[Batch]:
    return [pipe.run() for _ in range(count)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("data") / "imgs", counts=(3, 4))


@pipeline_def(num_threads=2, enable_checkpointing=True)
def dali_style(image_dir: str) -> Any:
    """As a DALI user writes it: no seed, a random draw whose values depend on it."""
    jpegs, labels = fn.readers.file(file_root=image_dir, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    angles = fn.random.uniform(range=(-30.0, 30.0))
    return fn.rotate(images, angle=angles, fill_value=0), labels, angles


def test_a_dali_script_checkpoints_and_restores_without_a_seed(data: Path) -> None:
    pipe = dali_style(str(data), batch_size=3)
    pipe.build()
    pipe.run()
    pipe.run()
    blob = pipe.checkpoint()
    assert isinstance(blob, bytes)
    expected = [pipe.run(), pipe.run()]

    pipe2 = dali_style(str(data), batch_size=3, checkpoint=blob)
    assert pipe2.spec.seed_drawn and pipe2.spec.seed != pipe.spec.seed  # a fresh draw ...
    pipe2.build()
    assert pipe2.spec.seed == pipe.spec.seed  # ... replaced by the checkpoint's
    got = [pipe2.run(), pipe2.run()]
    assert [batch_bytes(b) for b in got] == [batch_bytes(b) for b in expected]


def test_the_engine_restores_a_seedless_definition_from_a_checkpoint(data: Path) -> None:
    with conveyor_server.Pipeline(dali_style(str(data), batch_size=3)) as first:
        run_batches(first, 1)
        blob = first.checkpoint()
        expected = first.run()
    for given in (dali_style(str(data), batch_size=3), dali_style(str(data), batch_size=3).spec):
        with conveyor_server.Pipeline(given, checkpoint=blob) as restored:
            assert batch_bytes(restored.run()) == batch_bytes(expected)


def test_an_explicit_seed_that_differs_is_refused_naming_both(data: Path) -> None:
    blob = dali_style(str(data), batch_size=3, seed=12).checkpoint()
    with pytest.raises(SpecMismatch, match="seed: checkpoint has 12, pipeline has 13"):
        dali_style(str(data), batch_size=3, seed=13, checkpoint=blob).build()
    # A drawn seed in the checkpoint is refused too, where the restore names another.
    drawn = dali_style(str(data), batch_size=3)
    blob = drawn.checkpoint()
    with pytest.raises(SpecMismatch, match=f"seed: checkpoint has {drawn.seed}, pipeline has 7"):
        conveyor_server.Pipeline(dali_style(str(data), batch_size=3, seed=7), checkpoint=blob)
    # The same explicit seed restores.
    dali_style(str(data), batch_size=3, seed=drawn.seed, checkpoint=blob).build()


def test_a_drawn_seed_is_recorded_and_left_out_of_the_fingerprint(data: Path) -> None:
    drawn = dali_style(str(data), batch_size=3).spec
    given = dali_style(str(data), batch_size=3, seed=drawn.seed).spec
    also_drawn = dali_style(str(data), batch_size=3, seed=-1).spec  # DALI's "no seed"
    assert drawn.seed_drawn and also_drawn.seed_drawn and not given.seed_drawn
    assert specs.fingerprint(drawn) == specs.fingerprint(given)


def test_build_is_idempotent_and_run_builds(data: Path) -> None:
    pipe = dali_style(str(data), batch_size=3, seed=5)
    first = pipe.run()  # built on first use, as DALI's
    pipe.build()
    pipe.build()
    second = pipe.run()
    with conveyor_server.Pipeline(pipe.spec) as reference:
        assert [batch_bytes(b) for b in (first, second)] == \
            [batch_bytes(b) for b in run_batches(reference, 2)]


def test_schedule_run_outputs_and_shared_outputs_keep_the_order(data: Path) -> None:
    pipe = dali_style(str(data), batch_size=3, seed=5)
    with pytest.raises(FailedPrecondition, match="schedule_run"):
        pipe.outputs()
    pipe.schedule_run()
    pipe.schedule_run()
    first = pipe.outputs()
    second = pipe.share_outputs()
    with pytest.raises(FailedPrecondition, match="release_outputs"):
        pipe.share_outputs()
    pipe.release_outputs()
    pipe.schedule_run()
    blob_after_two = pipe.checkpoint()  # a scheduled batch not yet taken is not in it
    third = pipe.outputs()
    with conveyor_server.Pipeline(pipe.spec) as reference:
        assert [batch_bytes(b) for b in (first, second, third)] == \
            [batch_bytes(b) for b in run_batches(reference, 3)]
    resumed = dali_style(str(data), batch_size=3, seed=5, checkpoint=blob_after_two)
    assert batch_bytes(resumed.run()) == batch_bytes(third)


def test_epoch_size_and_reader_meta_name_every_reader_without_a_name(data: Path) -> None:
    pipe = dali_style(str(data), batch_size=3, seed=5)
    assert pipe.epoch_size() == {"Reader": 7}
    assert pipe.epoch_size("Reader") == 7
    meta = pipe.reader_meta("Reader")
    assert meta["epoch_size"] == 7
    assert pipe.reader_meta() == {"Reader": meta}
    pipe.reset()  # a stream goes on into the next epoch: nothing to reset
    assert len(first_batches(pipe, 3)[-1][0]) == 3  # 9 samples: past the 7 of an epoch


def test_output_dtype_and_ndim_are_checked(data: Path) -> None:
    checked = dali_style(str(data), batch_size=3, seed=5,
                         output_dtype=[types.UINT8, types.INT32, types.FLOAT],
                         output_ndim=[3, None, 0])
    assert len(checked.run()) == 3
    wrong = dali_style(str(data), batch_size=3, seed=5, output_dtype=types.FLOAT)
    with pytest.raises(InvalidArgument, match="output 0 has dtype uint8, but output_dtype "
                                              "asks for float32"):
        wrong.run()
    with pytest.raises(InvalidArgument, match="output 2 has \\[0\\] dimensions, but "
                                              "output_ndim asks for 1"):
        dali_style(str(data), batch_size=3, seed=5, output_ndim=[3, 1, 1]).run()
    with pytest.raises(InvalidArgument, match="output_dtype has 2 entries"):
        dali_style(str(data), batch_size=3, seed=5, output_dtype=[np.uint8, None]).run()


def test_dali_arguments_that_do_not_apply_are_accepted_and_change_nothing(data: Path) -> None:
    plain = dali_style(str(data), batch_size=3, seed=5)
    tuned = dali_style(str(data), batch_size=3, seed=5, exec_async=False, exec_pipelined=False,
                       py_start_method="spawn", py_num_workers=4, set_affinity=True)
    # The worker processes of parallel external sources are recorded, outside the stream.
    assert (tuned.spec.py_num_workers, tuned.spec.py_start_method) == (4, "spawn")
    assert specs.fingerprint(tuned.spec) == specs.fingerprint(plain.spec)
    assert (tuned.exec_async, tuned.exec_pipelined) == (False, False)
    assert [batch_bytes(b) for b in first_batches(tuned, 2)] == \
        [batch_bytes(b) for b in first_batches(plain, 2)]

    def misspelt(image_dir: str) -> Any:
        return fn.readers.file(file_root=image_dir)

    with pytest.raises(InvalidArgument, match="unknown pipeline argument"):
        conveyor_pipeline_def(batch_size=3, exec_asinc=False)(misspelt)(str(data))


def test_the_old_spellings_still_work(data: Path) -> None:
    """A ``PipelineSpec`` is taken where it was; the pipeline is taken there too."""
    pipe = dali_style(str(data), batch_size=3, seed=5)
    assert isinstance(pipe, DefinedPipeline)
    assert isinstance(pipe.spec, pipeline_pb2.PipelineSpec)
    assert specs.as_spec(pipe) is pipe.spec and specs.as_spec(pipe.spec) is pipe.spec
    with pytest.raises(InvalidArgument, match="got dict"):
        specs.as_spec({"batch_size": 3})  # type: ignore[arg-type]
    with conveyor_server.Pipeline(pipe) as from_pipeline, \
            conveyor_server.Pipeline(pipe.spec) as from_spec:
        assert batch_bytes(from_pipeline.run()) == batch_bytes(from_spec.run())
    assert (pipe.batch_size, pipe.num_threads, pipe.seed, pipe.device_id) == (3, 2, 5, None)


def test_without_the_engine_build_says_what_to_install(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = dali_style(str(data), batch_size=3, seed=5)
    monkeypatch.setitem(sys.modules, "conveyor_server", None)  # as if not installed
    with pytest.raises(FailedPrecondition, match=r"pip install \./server"):
        pipe.build()


def test_conveyor_dali_holds_dalis_module_names() -> None:
    import conveyor
    import conveyor.dali.fn as dali_fn
    import conveyor.dali.types as dali_types
    from conveyor.dali.pipeline import Pipeline
    from conveyor.dali.pipeline import pipeline_def as from_pipeline_module

    assert dali_fn.readers.file is conveyor.fn.readers.file
    assert dali_types.RGB is conveyor.types.RGB and dali_types.FLOAT is conveyor.types.FLOAT
    # DALI's decorator makes Conveyor's pipeline, whose outputs are DALI's tensor lists
    assert from_pipeline_module is pipeline_def
    assert issubclass(Pipeline, DefinedPipeline)
    assert isinstance(dali_style(".", batch_size=2), Pipeline)
    assert "decoders" in dir(dali_fn)
