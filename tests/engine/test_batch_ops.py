"""Operators per batch: the plan's segments, the barrier, and crop_mirror_normalize in both
forms giving the same bytes."""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.errors import DataFileError, FailedPrecondition, Internal, InvalidArgument
from conveyor.tensor_list import TensorList
from conveyor_server import Pipeline
from conveyor_server.engine import catalog
from conveyor_server.engine.batch_work import BatchPhase, BatchWork, SamplePhase
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.registry import BATCH, SAMPLE, BatchOp, OpContext, SampleOp
from conveyor_server.engine.plan import Step
from conveyor_server.engine.segments import SampleState, SegmentRunner
from tests.support.images import make_image_folder
from tests.support.op_helpers import op_context
from tests.support.resume import assert_resume_exact, assert_same_stream, run_batches


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("batch-ops") / "imgs", counts=(5, 6))


def training(root: str, *, crop: bool = True, threads: int = 2, batch: int = 4) -> Any:
    @pipeline_def(batch_size=batch, num_threads=threads, seed=5, enable_checkpointing=True)
    def train() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        crop_args: dict[str, Any] = {"crop": (20, 24)} if crop else {}
        out = fn.crop_mirror_normalize(images, mean=[120.0, 110.0, 100.0], std=[60.0],
                                       mirror=fn.random.coin_flip(),
                                       crop_pos_y=fn.random.uniform(range=(0.0, 1.0)),
                                       **crop_args)
        # A per-sample step after the batched one: a third segment.
        return fn.cast(out, dtype=types.FLOAT16), labels

    return train()


# -- crop_mirror_normalize: per batch == per sample --------------------------------------


def _context(**args: Any) -> OpContext:
    return op_context("crop_mirror_normalize", tensor_args=("mirror", "crop_pos_x"), **args)


def _both(images: Sequence[np.ndarray], targs: Mapping[str, list[np.ndarray]],
          **args: Any) -> tuple[list[np.ndarray], Sequence[np.ndarray]]:
    ctx = _context(**args)
    per_sample, per_batch = registry.build(ctx, SAMPLE), registry.build(ctx, BATCH)
    assert isinstance(per_sample, SampleOp) and isinstance(per_batch, BatchOp)
    one = [per_sample.fn([image], {k: v[i] for k, v in targs.items()})[0]
           for i, image in enumerate(images)]
    (batch,) = per_batch.fn([list(images)], targs)
    return one, batch


CASES = [
    {"crop": (24, 20), "mean": [120.0, 110.0, 100.0], "std": [60.0, 58.0, 57.0]},
    {"crop": (24, 20), "mean": [120.0], "std": [60.0], "output_layout": "CHW"},
    {"crop": (16, 16), "mean": [1.0, 2.0, 3.0], "std": [4.0], "pad_output": True},
    {"crop": (16, 16), "mean": [1.0], "std": [4.0], "pad_output": True, "output_layout": "CHW"},
    {"crop": (24, 20), "mean": [100.0], "std": [0.5], "dtype": types.UINT8},
    {"crop": (24, 20), "mean": [10.0], "std": [3.0], "dtype": types.INT8, "scale": 7.0,
     "shift": -3.0, "output_layout": "CHW"},
    {"crop": (24, 20), "mean": [10.0], "std": [3.0], "dtype": types.INT8, "scale": 7.0,
     "shift": -3.0},
    {"crop": (24, 20), "mean": [128.0], "std": [64.0], "dtype": types.FLOAT16},
]


@pytest.mark.parametrize("args", CASES)
@pytest.mark.parametrize("channels", [3, 1])
def test_the_batched_form_gives_the_per_sample_bytes_in_one_array(
        args: dict[str, Any], channels: int) -> None:
    if channels == 1:  # one value per channel, or one for all
        args = {k: v[:1] if k in ("mean", "std") else v for k, v in args.items()}
    rng = np.random.default_rng(channels)
    images = [rng.integers(0, 256, (30 + i, 26 + 2 * i, channels), dtype=np.uint8)
              for i in range(6)]
    targs: dict[str, list[np.ndarray]] = {
        "mirror": [np.array([i % 2], dtype=np.int32) for i in range(6)],
        "crop_pos_x": [np.array([x], dtype=np.float32) for x in rng.uniform(0, 1, 6)]}
    one, batch = _both(images, targs, **args)
    assert isinstance(batch, np.ndarray) and batch.shape == (6, *one[0].shape)
    for i in range(6):
        assert batch[i].dtype == one[i].dtype
        assert batch[i].tobytes() == one[i].tobytes(), f"sample {i} differs"
    as_array = TensorList(list(batch)).as_array()
    assert np.shares_memory(as_array, batch), "as_array() copied the batch"


def test_the_batched_form_normalizes_samples_of_several_shapes_one_by_one() -> None:
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (10 + i, 12, 3), dtype=np.uint8) for i in range(3)]
    targs: dict[str, list[np.ndarray]] = {
        "mirror": [np.array([1], dtype=np.int32)] * 3,
        "crop_pos_x": [np.array([0.5], dtype=np.float32)] * 3}
    one, batch = _both(images, targs, mean=[9.0], std=[2.0], output_layout="CHW")
    assert [b.shape for b in batch] == [o.shape for o in one] == [(3, 10 + i, 12)
                                                                  for i in range(3)]
    assert [b.tobytes() for b in batch] == [o.tobytes() for o in one]


def test_a_sample_error_in_a_batched_op_names_the_file_as_the_per_sample_form_does(
        data: Path) -> None:
    @pipeline_def(batch_size=4, seed=1)
    def bad() -> Any:
        jpegs, _ = fn.readers.file(file_root=str(data))
        images = fn.decoders.image(jpegs)
        return fn.crop_mirror_normalize(images, crop=(20, 20), mean=[0.0], std=[1.0],
                                        mirror=fn.random.uniform(range=(2.0, 3.0)))

    messages = []
    for batch_ops in (True, False):
        with Pipeline(bad(), batch_ops=batch_ops) as pipe, pytest.raises(
                InvalidArgument, match=r"crop_mirror_normalize \(op 3\) on '.*img_000.jpg': "
                                       r".*'mirror'") as caught:
            pipe.run()
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_a_batched_op_failing_as_a_whole_names_the_batch(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: OpContext) -> BatchOp:
        def fn_(inputs: Any, targs: Any) -> Any:
            raise RuntimeError("out of device memory")
        return BatchOp(fn_, ("HWC",))

    catalog.load()  # the built-in operators first
    monkeypatch.setitem(registry._BUILDERS, ("crop_mirror_normalize", BATCH), broken)
    with Pipeline(training(str(data))) as pipe, pytest.raises(
            Internal, match=r"crop_mirror_normalize \(op 4\) failed on batch 0: RuntimeError: "
                            "out of device memory"):
        pipe.run()


# -- the plan and the engine ---------------------------------------------------------------


def test_the_plan_groups_per_sample_steps_around_the_batched_one(data: Path) -> None:
    with Pipeline(training(str(data))) as batched:
        assert batched._plan.describe() == [
            "per sample: decoders.image@cpu",
            "per batch: crop_mirror_normalize@cpu",
            "per sample: cast@cpu",
        ]
    with Pipeline(training(str(data)), batch_ops=False) as per_sample:
        assert per_sample._plan.describe() == [
            "per sample: decoders.image@cpu, crop_mirror_normalize@cpu, cast@cpu"]


@pytest.mark.parametrize("crop", [True, False])
def test_batch_ops_change_nothing_but_speed(data: Path, crop: bool) -> None:
    spec = training(str(data), crop=crop)
    with Pipeline(spec, batch_ops=True) as a, Pipeline(spec, batch_ops=False) as b:
        assert_same_stream(run_batches(a, 7), run_batches(b, 7), "batch_ops")
        assert a.checkpoint() == b.checkpoint()


@pytest.mark.parametrize("threads", [1, 3])
def test_a_pipeline_with_a_batched_op_resumes_exactly_on_any_threads(data: Path,
                                                                     threads: int) -> None:
    spec = training(str(data), threads=threads)
    for before in (0, 3):
        assert_resume_exact(spec, before, 4)
    with Pipeline(spec) as pipe, Pipeline(training(str(data), threads=2)) as two:
        assert_same_stream(run_batches(pipe, 5), run_batches(two, 5), f"{threads} threads")


def test_a_bad_sample_before_the_barrier_ends_the_batch_naming_it(tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "imgs", counts=(4,))
    (root / "class_0" / "img_002.jpg").write_bytes(b"\xff\xd8\xff broken")

    @pipeline_def(batch_size=4, num_threads=2, seed=1)
    def plain() -> Any:
        jpegs, _ = fn.readers.file(file_root=str(root))
        return fn.crop_mirror_normalize(fn.decoders.image(jpegs), crop=(20, 20), mean=[0.0],
                                        std=[1.0])

    with Pipeline(plain()) as pipe, pytest.raises(DataFileError, match="img_002.jpg"):
        pipe.run()


def test_a_builder_must_return_the_form_it_was_registered_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(ctx: OpContext) -> SampleOp:
        return SampleOp(lambda inputs, targs: (), ())

    catalog.load()  # the built-in operators first
    monkeypatch.setitem(registry._BUILDERS, ("rotate", BATCH), wrong)
    with pytest.raises(TypeError, match="per-batch builder of 'rotate' returned a per-sample"):
        registry.build(dataclasses.replace(_context(), op_type="rotate"), BATCH)
    assert registry.forms("crop_mirror_normalize") == (SAMPLE, BATCH)
    assert registry.forms("resize") == (SAMPLE,)


# -- BatchWork: phases and the barrier -----------------------------------------------------


def _phases(log: list[str], lock: threading.Lock) -> list[Any]:
    def sample(tag: str) -> SamplePhase[dict[str, Any]]:
        def run(state: dict[str, Any]) -> None:
            with lock:
                log.append(f"{tag}{state['i']}")
            state[tag] = state["i"] * 10
        return SamplePhase(run)

    def barrier(states: list[dict[str, Any]]) -> None:
        with lock:
            log.append("barrier")
        total = sum(s["a"] for s in states)
        for s in states:
            s["total"] = total

    return [sample("a"), BatchPhase(barrier), sample("b")]


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_a_batch_phase_runs_once_after_every_sample_and_before_the_next_phase(
        threads: int) -> None:
    log: list[str] = []
    lock = threading.Lock()
    with ThreadPoolExecutor(threads) as pool:
        work = BatchWork([{"i": i} for i in range(6)], _phases(log, lock))
        work.start(pool, threads)
        assert work.ready(10)
        states = work.results()
    barrier = log.index("barrier")
    assert log.count("barrier") == 1
    assert sorted(log[:barrier]) == sorted(f"a{i}" for i in range(6))
    assert sorted(log[barrier + 1:]) == sorted(f"b{i}" for i in range(6))
    assert [s["total"] for s in states] == [150] * 6


def test_a_failing_batch_phase_is_raised_and_later_phases_do_not_run() -> None:
    ran: list[int] = []

    def fail(states: list[dict[str, int]]) -> None:
        raise InvalidArgument("the batch step refused")

    phases: list[Any] = [SamplePhase(lambda s: None), BatchPhase(fail),
                         SamplePhase(lambda s: ran.append(s["i"]))]
    with ThreadPoolExecutor(2) as pool:
        work = BatchWork([{"i": i} for i in range(4)], phases)
        work.start(pool, 2)
        with pytest.raises(InvalidArgument, match="the batch step refused"):
            work.results()
    assert ran == []


def test_a_cancelled_batch_stops_between_phases() -> None:
    release = threading.Event()
    reached: list[str] = []

    def slow(state: dict[str, int]) -> None:
        release.wait(10)

    phases: list[Any] = [SamplePhase(slow), BatchPhase(lambda states: reached.append("batch"))]
    with ThreadPoolExecutor(1) as pool:
        work = BatchWork([{"i": i} for i in range(3)], phases)
        work.start(pool, 1)
        work.cancel()
        release.set()
        assert work.ready(10)
    assert reached == []
    with pytest.raises(CancelledError):
        work.results()


def test_a_first_batch_phase_runs_on_a_worker_then_the_samples() -> None:
    ran: list[str] = []

    def lead(states: list[dict[str, int]]) -> None:
        ran.append(threading.current_thread().name)
        for s in states:
            s["lead"] = 1

    def refuse(states: list[dict[str, int]]) -> None:
        raise InvalidArgument("refused")

    phases: list[Any] = [BatchPhase(lead), SamplePhase(lambda s: s.update(b=s["lead"] + 1))]
    with ThreadPoolExecutor(2, thread_name_prefix="worker") as pool:
        work = BatchWork([{"i": i} for i in range(5)], phases)
        work.start(pool, 2)
        assert [s["b"] for s in work.results()] == [2] * 5
        failing = BatchWork([{"i": 0}], [BatchPhase(refuse),
                                         SamplePhase(lambda s: ran.append("sample"))])
        failing.start(pool, 2)
        with pytest.raises(InvalidArgument, match="refused"):
            failing.results()
    assert ran in (["worker_0"], ["worker_1"])


def test_a_batch_cancelled_before_its_first_batch_phase_runs_ends() -> None:
    release = threading.Event()
    ran: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        pool.submit(release.wait, 10)  # the only worker is busy
        work = BatchWork([{"i": 0}], [BatchPhase(lambda states: ran.append("lead")),
                                      SamplePhase(lambda s: ran.append("sample"))])
        work.start(pool, 1)
        work.cancel()
        assert work.ready(10)
        release.set()
    assert ran == []
    with pytest.raises(CancelledError):
        work.results()


def test_a_computed_batch_holds_its_outputs_and_no_intermediates(data: Path) -> None:
    with Pipeline(training(str(data))) as pipe:
        plan = pipe._plan
        assert plan.live_after[-1] == frozenset(plan.outputs)
        # After decoding (op 1): the images, the coin (op 2) and the uniform (op 3) the
        # batched op reads, the labels (op 0, output 1) and what later steps make (ops 4
        # and 5); not the file's bytes (op 0, output 0).
        assert plan.live_after[0] == frozenset({(0, 1), (1, 0), (2, 0), (3, 0), (4, 0),
                                                (5, 0)})
        pipe.next_ready(10)
        pipe.wait_prefetched()
        for work in pipe._queue._inflight:
            assert {frozenset(s.values) for s in work.results()} == {frozenset(plan.outputs)}


@pytest.mark.parametrize("threads", [1, 2])
def test_closing_a_pipeline_under_a_consumer_ends_its_wait(data: Path, threads: int) -> None:
    """close() on another thread cancels the batch run() waits for, whichever phase it is
    in (later phases are queued behind other batches), so run() raises instead of hanging."""
    spec = training(str(data), threads=threads).spec
    spec.prefetch_queue_depth = 4
    for attempt in range(30):
        pipe = Pipeline(spec)
        outcome: list[BaseException | None] = []
        consumed = threading.Semaphore(0)

        def consume(pipe: Pipeline = pipe, outcome: list[BaseException | None] = outcome,
                    consumed: threading.Semaphore = consumed) -> None:
            try:
                while True:
                    pipe.run()
                    consumed.release()
            except BaseException as exc:
                outcome.append(exc)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        for _ in range(1 + attempt % 3):  # close while run() waits at various points
            assert consumed.acquire(timeout=10)
        pipe.close()
        consumer.join(10)
        assert not consumer.is_alive(), "run() is still waiting after close()"
        assert outcome and isinstance(outcome[0], FailedPrecondition), outcome


class Token:
    """A value whose life a weak reference shows."""


def test_a_chain_drops_a_column_after_the_last_step_that_reads_it() -> None:
    """Three batch steps in a chain, the first's output read by the second only: it is
    gone while the third runs (a GPU batch's memory is not held past its use), and the
    samples keep only what is live after the chain."""
    made: list[weakref.ref[Token]] = []
    alive_in_third: list[list[bool]] = []

    def first(inputs: Sequence[Any], targs: Any) -> tuple[list[Any], ...]:
        out = [Token() for _ in inputs[0]]
        made.extend(weakref.ref(t) for t in out)
        return (out,)

    def second(inputs: Sequence[Any], targs: Any) -> tuple[list[Any], ...]:
        return ([np.zeros(1) for _ in inputs[0]],)

    def third(inputs: Sequence[Any], targs: Any) -> tuple[list[Any], ...]:
        gc.collect()
        alive_in_third.append([ref() is not None for ref in made])
        return ([np.ones(1) for _ in inputs[0]],)

    steps = [Step(n, name, BatchOp(fn=fn, layouts=("",)), [(n - 1, 0)], {}, 1)
             for n, (name, fn) in enumerate((("first", first), ("second", second),
                                             ("third", third)), start=1)]
    runner = object.__new__(SegmentRunner)  # the chain needs no plan
    chain = runner._chain(steps, frozenset({(3, 0), (0, 0)}))
    states = [SampleState({(0, 0): np.zeros(1)}) for _ in range(3)]
    chain(0, states)
    assert alive_in_third == [[False, False, False]]
    assert all(set(s.values) == {(0, 0), (3, 0)} for s in states)
