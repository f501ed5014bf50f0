"""``fn.external_source`` in process: epochs ended by ``StopIteration``, exact resume at any
position (the shared property), positions beyond those produced found without replay,
invariance to threads and prefetch, draws keyed by global sample index, and errors that
name the source."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor.definition.external_source import BatchInfo, SampleInfo, source_name
from conveyor_server import Pipeline
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.stages.random_ops import RandomStage
from conveyor_server.engine.stages.source_callables import ExternalSources
from tests.support import external_sources as es
from tests.support.images import make_image_folder
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches


def sample_pipeline(**options: Any) -> Any:
    @pipeline_def(batch_size=es.BATCH, seed=5, enable_checkpointing=True, **options)
    def pipeline() -> Any:
        images, labels = fn.external_source(source=es.samples, batch=False, num_outputs=2,
                                            dtype=[types.UINT8, types.INT32],
                                            layout=["HWC", ""])
        flipped = fn.flip(images, horizontal=fn.random.coin_flip())
        return flipped, labels, fn.random.uniform(range=(0.0, 1.0))
    return pipeline()


def batch_pipeline(**options: Any) -> Any:
    @pipeline_def(batch_size=es.BATCH, seed=5, enable_checkpointing=True, **options)
    def pipeline() -> Any:
        vectors = fn.external_source(source=es.batches, batch=True, batch_info=True,
                                     ndim=1)
        numbers = fn.external_source(source="tests.support.external_sources:iterations")
        return vectors, numbers, fn.random.normal(stddev=2.0)
    return pipeline()


PIPELINES = {"samples": sample_pipeline, "batches": batch_pipeline}


def labels_of(batch: Any) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in s) for s in batch[1]]


def test_stop_iteration_ends_the_epoch_and_drops_the_cut_batch() -> None:
    with Pipeline(sample_pipeline()) as pipe:
        got = [labels_of(b) for b in run_batches(pipe, 6)]
    # Epoch 0 has 10 samples: batches at 0 and 4; the one at 8 is cut short and dropped.
    # Epoch 1 has 14: three whole batches; then epoch 2 starts again at index 0.
    firsts = [(b[0][0], b[0][1]) for b in got]
    assert firsts == [(0, 0), (0, 4), (1, 0), (1, 4), (1, 8), (2, 0)]
    assert got[1] == [(0, 4 + i, i, 1) for i in range(4)]  # (epoch, idx, idx_in_batch, it)


def test_batch_sources_get_batch_info_or_the_iteration() -> None:
    with Pipeline(batch_pipeline()) as pipe:
        batches = run_batches(pipe, 8)
    vectors = [tuple(int(v) for v in b[0].at(0)) for b in batches]
    assert vectors == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (1, 0, 0), (1, 1, 0), (1, 2, 0),
                       (1, 3, 0), (2, 0, 0)]
    numbers = [int(b[1].at(0)[0]) for b in batches]
    assert numbers == [0, 100, 200, 300, 400, 0, 100, 200]  # epochs of 5 iterations
    assert batches[0][1].as_array().shape == (4, 2)


@pytest.mark.parametrize("kind", sorted(PIPELINES))
def test_resume_is_exact_at_every_position(kind: str) -> None:
    spec = PIPELINES[kind]()
    for before in (0, 1, 2, 3, 5, 6, 11):  # both sides of several epoch ends
        blob = assert_resume_exact(spec, before, 6)
        states = [s for s in ckpt.open_blob(blob).op_states if s.HasField("external_source")]
        assert states and all(s.external_source.source.startswith("tests.support.external_sources:")
                              for s in states)


@pytest.mark.parametrize("kind", sorted(PIPELINES))
@pytest.mark.parametrize(("threads", "depth"), [(1, 1), (4, 1), (1, 4), (3, 3)])
def test_stream_does_not_depend_on_threads_or_prefetch(kind: str, threads: int,
                                                       depth: int) -> None:
    make = PIPELINES[kind]
    with Pipeline(make(num_threads=1, prefetch_queue_depth=1)) as a, \
            Pipeline(make(num_threads=threads, prefetch_queue_depth=depth)) as b:
        assert_same_stream(run_batches(a, 9), run_batches(b, 9), f"{threads}x{depth}")


def test_random_draws_stay_keyed_by_global_sample_index() -> None:
    """The source's epochs restart its positions; later draws go on by global index."""
    spec = sample_pipeline().spec
    (uniform,) = [i for i, op in enumerate(spec.ops) if op.type == "random.uniform"]
    keyed = RandomStage("random.uniform", uniform, {"range": (0.0, 1.0), "values": None,
                                                    "shape": (), "dtype": "float32"},
                        batch_size=es.BATCH, seed=5)
    with Pipeline(spec) as pipe:
        for n, batch in enumerate(run_batches(pipe, 7)):  # across three epoch ends
            assert np.array_equal(batch[2].as_array(), keyed.draw(n * es.BATCH, es.BATCH))


def test_a_position_beyond_those_produced_is_found_without_replay() -> None:
    calls: list[tuple[int, int]] = []

    def counted(info: BatchInfo) -> list[np.ndarray]:
        calls.append((info.epoch_idx, info.iteration))
        if info.iteration >= 40 + 7 * (info.epoch_idx % 3):
            raise StopIteration
        return [np.array([info.epoch_idx, info.iteration, i], np.int64) for i in range(2)]

    @pipeline_def(batch_size=2, seed=1, enable_checkpointing=True)
    def pipeline() -> Any:
        return (fn.external_source(source=counted, batch_info=True),)

    spec = pipeline()
    with Pipeline(spec) as reference:
        blob = reference.checkpoint()
        expected = run_batches(reference, 300)
    for target in (1, 39, 40, 41, 87, 88, 150, 297):
        with Pipeline(spec, checkpoint=blob) as restored:
            calls.clear()
            restored.seek(target)
            found = len(calls)
            got = run_batches(restored, 3)
        assert_same_stream(expected[target:target + 3], got, f"seek {target}")
        # A handful of calls per epoch ended on the way (binary search), never one per batch.
        assert found <= 1 + 8 * (1 + target // 40), (target, found)
    assert found < 60


def test_checkpoint_names_the_source_and_refuses_a_server_without_it() -> None:
    spec = sample_pipeline()
    with Pipeline(spec) as pipe:
        run_batches(pipe, 3)
        blob = pipe.checkpoint()
    (state,) = [s.external_source for s in ckpt.open_blob(blob).op_states
                if s.HasField("external_source")]
    assert (state.source, state.epoch, state.iteration) == (
        "tests.support.external_sources:samples", 1, 1)
    with pytest.raises(errors.SpecError, match=r"'tests\.support\.external_sources:samples' "
                                               r"\(ops\[0\]\.args\.source\) is not registered"):
        Pipeline(spec, checkpoint=blob, sources=ExternalSources({}))
    with pytest.raises(errors.SpecError, match=r"is not registered"):
        Pipeline(spec, sources=ExternalSources(
            {"tests.support.external_sources:batches": es.batches}))
    registered = ExternalSources.configured(["tests.support.external_sources:samples"])
    with Pipeline(spec, checkpoint=blob, sources=registered) as restored:
        assert labels_of(restored.run())[0] == (1, 4, 0, 1)


def test_a_raising_source_is_data_loss_naming_it_at_its_own_batch() -> None:
    @pipeline_def(batch_size=es.BATCH, seed=1, prefetch_queue_depth=4)
    def pipeline() -> Any:
        return (fn.external_source(source=es.failing, batch_info=True),)

    with Pipeline(pipeline()) as pipe:
        run_batches(pipe, 2)  # computed ahead of the failure, returned first
        for _ in range(2):  # the pipeline stays at its position: the same error again
            with pytest.raises(errors.ExternalSourceError) as caught:
                pipe.run()
            assert caught.value.code == "DATA_LOSS"
            assert caught.value.metadata["source"] == "tests.support.external_sources:failing"
            assert "raised OSError at epoch 0, iteration 2: the feature store" in str(
                caught.value)
        assert pipe.batches_returned == 2


@pytest.mark.parametrize(("source", "args", "message"), [
    (lambda info: [np.zeros(2)] * 3, {}, r"returned 3 samples, the batch size is 4"),
    (lambda info: [np.zeros(2, np.float64)] * 4, {"dtype": types.FLOAT},
     r"returned float64, dtype is float32"),
    (lambda info: [np.zeros(2)] * 4, {"ndim": 2}, r"returned 1 dimensions, expected 2"),
    (lambda info: [np.zeros(2)] * 4, {"layout": "HW"}, r"returned 1 dimensions, expected 2"),
    (lambda info: ["text"] * 4, {}, r"returned <U4 data, expected numbers"),
    (lambda info: np.zeros((4, 2)), {"num_outputs": 2}, r"expected a tuple of num_outputs=2"),
    (lambda info: next(iter(())), {}, r"epoch 0 is empty"),
])
def test_what_cannot_be_a_batch_is_data_loss_naming_the_source(
        source: Any, args: dict[str, Any], message: str) -> None:
    @pipeline_def(batch_size=4, seed=1)
    def pipeline() -> Any:
        out = fn.external_source(source=source, **args)
        return tuple(out) if isinstance(out, tuple) else (out,)

    with Pipeline(pipeline()) as pipe, pytest.raises(errors.ExternalSourceError,
                                                     match=message) as caught:
        pipe.run()
    # A lambda of a module's code constants is named by identity (``<lambda>~n``).
    assert caught.value.metadata["source"].startswith(
        "tests.engine.test_external_source:<lambda>~")


def test_spec_errors_name_the_argument() -> None:
    def build(**kwargs: Any) -> Any:
        @pipeline_def(batch_size=2, seed=1)
        def pipeline() -> Any:
            out = fn.external_source(**kwargs)
            return tuple(out) if isinstance(out, tuple) else (out,)
        return pipeline()

    with pytest.raises(errors.SpecError, match=r"argument 'source': is required"):
        build()
    with pytest.raises(errors.SpecError, match=r"argument 'cycle': applies to iterables"):
        build(source=es.samples, cycle=True)
    with pytest.raises(errors.InvalidArgument, match=r"expected 'module:function'"):
        build(source="not a name")
    with pytest.raises(errors.SpecError, match=r"argument 'layout': has 3 entries for 2"):
        Pipeline(build(source=es.samples, num_outputs=2, layout=["HWC", "", "C"]))
    with pytest.raises(errors.InvalidArgument, match=r"cannot import 'tests.nothing:here'"):
        Pipeline(build(source="tests.nothing:here"))


def test_sample_info_and_batch_info_are_dali_s_types() -> None:
    assert types.SampleInfo is SampleInfo and types.BatchInfo is BatchInfo
    info = SampleInfo(idx_in_epoch=9, idx_in_batch=1, iteration=2, epoch_idx=3)
    assert (info.idx_in_epoch, info.idx_in_batch, info.iteration, info.epoch_idx) == (9, 1, 2, 3)


def test_a_source_feeds_image_slice_its_windows(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(4, 3))

    @pipeline_def(batch_size=3, seed=2, enable_checkpointing=True, num_threads=2)
    def sliced() -> Any:
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=True)
        anchor, shape = fn.external_source(source=es.windows, batch=False, num_outputs=2)
        return fn.decoders.image_slice(jpegs, anchor, shape), anchor, shape, labels

    spec = sliced()
    for before in (0, 2, 5):
        assert_resume_exact(spec, before, 4)
    with Pipeline(spec) as pipe:
        images, anchors, _, _ = pipe.run()
    assert [a.tolist() for a in anchors] == [es.windows(SampleInfo(i, i, 0, 0))[0].tolist()
                                             for i in range(3)]
    assert len({tuple(i.shape) for i in images}) > 1  # the windows follow the source


class _Offset:
    """Not plain data: closures over it are told apart by identity."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


def _held_source(held: _Offset) -> Any:
    def src(info: SampleInfo) -> np.ndarray:
        return np.array([info.idx_in_epoch + held.offset], dtype=np.int64)
    return src


def test_two_closures_of_one_factory_each_keep_their_own_values() -> None:
    def pipeline() -> Any:
        @pipeline_def(batch_size=2, seed=1, enable_checkpointing=True)
        def defined() -> Any:
            return (fn.external_source(source=es.make_offset_source(10), batch=False),
                    fn.external_source(source=es.make_offset_source(20), batch=False),
                    fn.external_source(source=_held_source(_Offset(30)), batch=False),
                    fn.external_source(source=_held_source(_Offset(40)), batch=False))
        return defined()

    spec = pipeline().spec
    names = [op.args["source"].s for op in spec.ops]
    assert len(set(names)) == 4, names
    # Over plain data: named by definition (code and values); over an object: by identity.
    assert names[0].split("@")[0] == names[1].split("@")[0]
    assert names[2].rpartition("~")[0] == names[3].rpartition("~")[0]
    assert names[2].rpartition("~")[2].isdigit() and names[3].rpartition("~")[2].isdigit()
    with Pipeline(spec) as pipe:
        first = [[int(s[0]) for s in out] for out in pipe.run()]
        assert first == [[10, 11], [20, 21], [30, 31], [40, 41]]
        run_batches(pipe, 2)
        checkpoint = pipe.checkpoint()
        after = run_batches(pipe, 3)
    # A fresh pipeline object from the same definition has the same fingerprint and
    # restores, though its closures over objects are other objects.
    again = pipeline()
    assert [op.args["source"].s for op in again.spec.ops][2:] != names[2:]
    with Pipeline(again, checkpoint=checkpoint) as restored:
        assert_same_stream(after, run_batches(restored, 3), "restored")


def test_one_object_s_method_read_twice_is_one_source() -> None:
    held = es.Scaled()

    @pipeline_def(batch_size=2, seed=1)
    def pipeline() -> Any:
        return (fn.external_source(source=held.method, batch=False),
                fn.external_source(source=held.method, batch=False),
                fn.external_source(source=es.Scaled().method, batch=False))
    names = [op.args["source"].s for op in pipeline().spec.ops]
    assert names[0] == names[1] != names[2]
    assert names[0].startswith("tests.support.external_sources:Scaled.method~")


def test_a_closure_over_plain_data_has_the_same_name_in_every_process() -> None:
    code = ("from conveyor.definition.external_source import source_name\n"
            "from tests.support import external_sources as es\n"
            "print(source_name(es.make_offset_source(20, 2.0, ('a', 'b'))))")
    repo = Path(__file__).resolve().parents[2]
    names = {subprocess.run([sys.executable, "-c", code], cwd=repo, check=True, text=True,
                            capture_output=True,
                            env={**os.environ, "PYTHONPATH": str(repo), "PYTHONHASHSEED": seed}
                            ).stdout.strip() for seed in ("1", "2")}
    assert names == {source_name(es.make_offset_source(20, 2.0, ("a", "b")))}
