"""``fn.external_source(parallel=True)`` in process: the same bytes as the serial source for
both calling conventions and any number of workers, checkpoints that restore across worker
counts and across parallel and serial, no process left once a pipeline is closed (or
collected), a worker killed mid-run replaced without a changed byte, a source that crashes
its worker failing with a clear error, closures over plain data rebuilt in the workers
(each with its own values, restored in a fresh pipeline), and callables that workers cannot
rebuild refused when defined."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor.definition import spec as specs
from conveyor.definition.external_source import SampleInfo
from conveyor_server import Pipeline
from tests.support import external_sources as es
from tests.support.resume import assert_same_stream, run_batches

ROOT = Path(__file__).resolve().parents[2]

STREAM = 12  # batches: across four epoch ends of either source


def sample_pipeline(parallel: bool, workers: int = 2, method: str = "fork", **extra: Any) -> Any:
    @pipeline_def(batch_size=es.BATCH, seed=5, enable_checkpointing=True, py_num_workers=workers,
                  py_start_method=method)
    def pipeline() -> Any:
        images, labels = fn.external_source(source=es.samples, batch=False, num_outputs=2,
                                            dtype=[types.UINT8, types.INT32],
                                            layout=["HWC", ""], parallel=parallel, **extra)
        return fn.flip(images, horizontal=fn.random.coin_flip()), labels
    return pipeline()


def batch_pipeline(parallel: bool, workers: int = 2, method: str = "fork", **extra: Any) -> Any:
    @pipeline_def(batch_size=es.BATCH, seed=5, enable_checkpointing=True, py_num_workers=workers,
                  py_start_method=method)
    def pipeline() -> Any:
        vectors = fn.external_source(source=es.batches, batch_info=True, ndim=1,
                                     parallel=parallel, **extra)
        numbers = fn.external_source(source="tests.support.external_sources:iterations",
                                     parallel=parallel, **extra)
        return vectors, numbers, fn.random.normal(stddev=2.0)
    return pipeline()


PIPELINES = {"samples": sample_pipeline, "batches": batch_pipeline}


@pytest.fixture(scope="module")
def serial() -> dict[str, list[Any]]:
    """Each pipeline's stream with parallel=False."""
    out = {}
    for kind, make in PIPELINES.items():
        with Pipeline(make(False)) as pipe:
            out[kind] = run_batches(pipe, STREAM)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not been reaped (a zombie counts)."""
    return Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("kind", sorted(PIPELINES))
@pytest.mark.parametrize(("workers", "depth"), [(1, 1), (2, 1), (3, 2), (5, 4)])
def test_outputs_equal_the_serial_source(serial: dict[str, list[Any]], kind: str, workers: int,
                                         depth: int) -> None:
    spec = PIPELINES[kind](True, workers, prefetch_queue_depth=depth)
    with Pipeline(spec) as pipe:
        pool = pipe._plan.source_pool
        assert pool is not None and len(pool.pids()) == workers
        assert_same_stream(serial[kind], run_batches(pipe, STREAM), f"{workers} workers")


def test_spawned_workers_give_the_same_bytes_and_leave_no_process(
        serial: dict[str, list[Any]]) -> None:
    with Pipeline(sample_pipeline(True, 2, "spawn")) as pipe:
        pool = pipe._plan.source_pool
        assert pool is not None and pool.start_method == "spawn"
        pids = pool.pids()
        assert_same_stream(serial["samples"], run_batches(pipe, STREAM), "spawn")
    assert pids and not any(alive(pid) for pid in pids)


def test_closing_or_dropping_a_pipeline_leaves_no_child_process() -> None:
    pipe = Pipeline(batch_pipeline(True, 3))
    run_batches(pipe, 2)
    pool = pipe._plan.source_pool
    assert pool is not None
    pids = pool.pids()
    assert len(pids) == 3 and all(alive(pid) for pid in pids)
    pipe.close()
    assert not any(alive(pid) for pid in pids)
    assert multiprocessing.active_children() == []
    pipe.close()  # again: nothing to do
    with pytest.raises(errors.ExternalSourceError, match="workers are closed"):
        pool.submit(0, "x", epoch=0, iteration=0, probe=True)

    dropped = Pipeline(batch_pipeline(True, 2))
    run_batches(dropped, 1)
    pool = dropped._plan.source_pool
    assert pool is not None
    pids = pool.pids()
    del dropped, pool
    gc.collect()
    assert pids and not any(alive(pid) for pid in pids)


def test_a_failed_build_leaves_no_child_process() -> None:
    with Pipeline(batch_pipeline(False)) as other:
        blob = other.checkpoint()
    with pytest.raises(errors.SpecMismatch):
        Pipeline(sample_pipeline(True, 2), checkpoint=blob)
    gc.collect()
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("kind", sorted(PIPELINES))
def test_checkpoints_restore_across_worker_counts_and_parallel_or_serial(
        serial: dict[str, list[Any]], kind: str) -> None:
    make = PIPELINES[kind]
    variants = {"serial": make(False), **{f"{w} workers": make(True, w) for w in (1, 2, 3)}}
    assert len({specs.fingerprint(v.spec) for v in variants.values()}) == 1
    assert [op.args["parallel"].b for op in variants["2 workers"].spec.ops
            if op.type == "external_source"] == [True] * (2 if kind == "batches" else 1)
    for saved_by, spec in variants.items():
        with Pipeline(spec) as pipe:
            blobs = {}
            for k in range(7):
                if k in (0, 2, 3, 5):  # both sides of epoch ends
                    blobs[k] = pipe.checkpoint()
                pipe.run()
        for k, blob in blobs.items():
            for restored_by, other in variants.items():
                if restored_by == saved_by or (k, restored_by) not in {
                        (0, "serial"), (2, "3 workers"), (3, "1 workers"), (5, "2 workers"),
                        (2, "serial"), (5, "serial"), (3, "3 workers")}:
                    continue
                with Pipeline(other, checkpoint=blob) as restored:
                    assert_same_stream(serial[kind][k:k + 4], run_batches(restored, 4),
                                       f"saved by {saved_by} at {k}, restored by {restored_by}")


def test_a_seek_past_the_produced_positions_asks_the_workers() -> None:
    spec = batch_pipeline(True, 2)
    with Pipeline(batch_pipeline(False)) as reference:
        blob = reference.checkpoint()
        expected = run_batches(reference, 20)
    for target in (3, 7, 16):
        with Pipeline(spec, checkpoint=blob) as restored:
            restored.seek(target)
            assert_same_stream(expected[target:target + 3], run_batches(restored, 3),
                               f"seek {target}")


@pytest.mark.parametrize("kind", sorted(PIPELINES))
def test_a_killed_worker_is_replaced_and_no_byte_changes(serial: dict[str, list[Any]],
                                                         kind: str) -> None:
    with Pipeline(PIPELINES[kind](True, 2, prefetch_queue_depth=3)) as pipe:
        pool = pipe._plan.source_pool
        assert pool is not None
        got = run_batches(pipe, 3)
        first = pool.pids()
        os.kill(first[0], signal.SIGKILL)  # its prefetched tasks are in flight or done
        got += run_batches(pipe, STREAM - 3)
        now = pool.pids()
        assert first[0] not in now and first[1] in now and len(now) == 2
        assert not alive(first[0])
    assert_same_stream(serial[kind], got, "a worker killed after 3 batches")


def test_a_source_that_crashes_its_worker_fails_the_batch_and_does_not_hang() -> None:
    @pipeline_def(batch_size=es.BATCH, seed=1, enable_checkpointing=True, py_num_workers=2)
    def pipeline() -> Any:
        return (fn.external_source(source=es.crashing, batch_info=True, parallel=True),)

    with Pipeline(pipeline()) as pipe:
        assert [int(b[0].at(0)[0]) for b in run_batches(pipe, 2)] == [0, 1]
        with pytest.raises(errors.ExternalSourceError,
                           match=r"external_source \(op 0\) 'tests\.support\.external_sources:"
                                 r"crashing' at epoch 0, iteration 2: its worker process died "
                                 r"twice while computing it \(the last, pid \d+: killed by "
                                 r"signal 9 \(SIGKILL\)\)") as failed:
            pipe.run()
        assert failed.value.metadata["source"] == "tests.support.external_sources:crashing"


def test_errors_and_wrong_results_read_as_the_serial_source_s() -> None:
    def failing(parallel: bool) -> Any:
        @pipeline_def(batch_size=es.BATCH, seed=1, enable_checkpointing=True, py_num_workers=2)
        def pipeline() -> Any:
            return (fn.external_source(source=es.failing, batch_info=True, parallel=parallel),)
        return pipeline()

    def wrong_dtype(parallel: bool) -> Any:
        @pipeline_def(batch_size=es.BATCH, seed=1, enable_checkpointing=True, py_num_workers=3)
        def pipeline() -> Any:
            return fn.external_source(source=es.samples, batch=False, num_outputs=2,
                                      dtype="float32", parallel=parallel)
        return pipeline()

    for make, skip, expected in ((failing, 2, "raised OSError at epoch 0, iteration 2: the "
                                              "feature store is unreachable"),
                                 (wrong_dtype, 0, "at epoch 0, iteration 0: output 0: "
                                                  "returned uint8, dtype is float32")):
        messages = []
        for parallel in (False, True):
            with Pipeline(make(parallel)) as pipe:
                run_batches(pipe, skip)
                with pytest.raises(errors.ExternalSourceError) as failed:
                    pipe.run()
                messages.append(str(failed.value))
        assert messages[0] == messages[1]
        assert expected in messages[0]


def module_level(info: SampleInfo) -> np.ndarray:
    return np.array([info.idx_in_epoch], dtype=np.int64)


def test_callables_workers_cannot_rebuild_are_refused_when_defined() -> None:
    held = es.Scaled()

    def over_object(info: SampleInfo) -> np.ndarray:
        return held(info)

    cases = {
        "closure over an object": (
            es.make_held_source(held), r"'tests\.support\.external_sources:make_held_source"
            r"\.<locals>\.src' closes over 'held', a Scaled, which is not plain data \(None, "
            r"bool, int, float, str, bytes, numpy scalars, and tuples, lists and dicts of "
            r"those\): worker processes import the source's module and rebuild it without "
            r"pickling, so give a function defined in a module, or one made by a factory whose "
            r"variables are plain data"),
        "local closure over an object": (over_object, r"closes over 'held', a Scaled"),
        "lambda over an object": (lambda info: held.method(info) + 1,
                                  r"<lambda>' closes over 'held'"),
        "bound method": (held.method, r"'tests\.support\.external_sources:Scaled\.method' is "
                                      r"a bound method, which worker processes cannot rebuild"),
        "callable object": (held, r"has no module and name, so worker processes cannot "
                                  r"import it"),
    }
    for what, (source, message) in cases.items():
        with pytest.raises(errors.InvalidArgument, match=message):
            @pipeline_def(batch_size=2, seed=1)
            def pipeline(source: Any = source) -> Any:
                return (fn.external_source(source=source, batch=False, parallel=True),)
            pipeline()
        if what == "callable object":
            continue  # not even parallel=False names one
        # parallel=False takes it, as before.
        @pipeline_def(batch_size=2, seed=1)
        def serial_pipeline(source: Any = source) -> Any:
            return (fn.external_source(source=source, batch=False),)
        assert serial_pipeline().spec.ops[0].args["source"].s, what

    @pipeline_def(batch_size=2, seed=1)
    def good() -> Any:
        return (fn.external_source(source=module_level, batch=False, parallel=True),)
    assert good().spec.ops[0].args["source"].s == \
        "tests.engine.test_parallel_source:module_level"


def closures_pipeline(parallel: bool, method: str = "spawn", scale: float = 2.0) -> Any:
    """Three closures of one factory (two with the same qualified name from two branches),
    a lambda over plain data and numpy scalars."""
    offset = np.int64(100)

    @pipeline_def(batch_size=3, seed=1, enable_checkpointing=True, py_num_workers=2,
                  py_start_method=method)
    def pipeline() -> Any:
        return (fn.external_source(source=es.make_offset_source(10), batch=False,
                                   parallel=parallel),
                fn.external_source(source=es.make_offset_source(20, scale, ("a", "b")),
                                   batch=False, parallel=parallel),
                fn.external_source(source=es.make_offset_source(30, tags=("x", "y", "z")),
                                   batch=False, parallel=parallel),
                fn.external_source(source=lambda info, k=offset: np.array(
                    [info.idx_in_epoch + k], dtype=np.int64), batch=False, parallel=parallel))
    return pipeline()


def test_closures_over_plain_data_run_in_workers_as_serially() -> None:
    with Pipeline(closures_pipeline(False)) as pipe:
        serial = run_batches(pipe, 4)
    first = [[list(s) for s in out] for out in serial[0]]
    # Each closure gives its own values: 3 samples a batch, positions 0, 1, 2.
    assert first == [[[10, 1], [11, 1], [12, 1]], [[20, 2], [22, 2], [24, 2]],
                     [[30, 3], [31, 3], [32, 3]], [[100], [101], [102]]]
    for method in ("spawn", "fork"):
        with Pipeline(closures_pipeline(True, method)) as pipe:
            assert_same_stream(serial, run_batches(pipe, 4), method)


def test_a_closure_s_name_is_its_definition_and_restores_in_a_fresh_pipeline() -> None:
    names = [op.args["source"].s for op in closures_pipeline(True).spec.ops]
    assert len(set(names)) == 4
    assert names[0].startswith("tests.support.external_sources:make_offset_source.<locals>"
                               ".src@")
    # The same definition gives the same spec; other values another.
    assert specs.fingerprint(closures_pipeline(True).spec) == \
        specs.fingerprint(closures_pipeline(False).spec)
    assert specs.fingerprint(closures_pipeline(True, scale=3.0).spec) != \
        specs.fingerprint(closures_pipeline(True).spec)
    with Pipeline(closures_pipeline(True)) as pipe:
        run_batches(pipe, 2)
        checkpoint = pipe.checkpoint()
        after = run_batches(pipe, 3)
    with Pipeline(closures_pipeline(True), checkpoint=checkpoint) as restored:
        assert_same_stream(after, run_batches(restored, 3), "restored")
#: A trainer's script, run as ``python script.py``: its sources are the main script's own
#: (a top-level function using a helper and a module, and a closure made by a factory, as
#: DALI's checkpointing tests make theirs), read by workers started with "spawn" and
#: compared with the same sources read serially, across a checkpoint and its restore.
MAIN_SCRIPT = """
import sys
import numpy as np
from conveyor import fn, pipeline_def
from conveyor_server import Pipeline

OFFSET = 7

def helper(i):
    return i * 2 + OFFSET

def top_level(info):
    return np.array([info.idx_in_epoch, helper(info.idx_in_epoch)], dtype=np.int64)

def make_source(epoch_size, batch_size):
    def src(idx):
        if idx.iteration >= epoch_size:
            raise StopIteration()
        return [np.asarray([idx.epoch_idx, idx.iteration, i]) for i in range(batch_size)]
    return src

def pipeline(parallel, checkpoint=None):
    @pipeline_def(batch_size=3, seed=1, num_threads=2, py_num_workers=2,
                  py_start_method="spawn", enable_checkpointing=True)
    def defined():
        a = fn.external_source(source=top_level, batch=False, parallel=parallel)
        b = fn.external_source(source=make_source(4, 3), batch=True, batch_info=True,
                               parallel=parallel)
        return a, b
    return Pipeline(defined(), checkpoint=checkpoint)

def batches(pipe, count):
    out = []
    while len(out) < count:
        try:
            out.append([[np.asarray(s).tolist() for s in o] for o in pipe.run()])
        except StopIteration:
            pipe.reset()
    return out

if __name__ == "__main__":
    with pipeline(False) as serial:
        expected = batches(serial, 10)
    with pipeline(True) as spawned:
        got = batches(spawned, 4)
        checkpoint = spawned.checkpoint()
    with pipeline(True, checkpoint) as restored:
        got += batches(restored, 6)
    assert got == expected, (got, expected)
    print("same", len(got))
"""


def test_the_main_script_s_functions_run_in_spawned_workers(tmp_path: Path) -> None:
    """A parallel source defined in the script being run (``__main__``) reaches workers
    started with "spawn" by value, and gives the serial source's batches across a
    restore; no worker runs the script again (it has a ``__main__`` guard, and nothing
    else would print)."""
    script = tmp_path / "train.py"
    script.write_text(MAIN_SCRIPT)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=240, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["same", "10"]


def test_a_main_script_function_that_cannot_go_by_value_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(MAIN_SCRIPT.replace("OFFSET = 7", "OFFSET = object()").replace(
        "return i * 2 + OFFSET", "return i * 2 + id(OFFSET) % 1"))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=240, check=False, cwd=ROOT)
    assert run.returncode != 0
    assert ("'__main__:top_level' (ops[0].args.source) is defined in the main script, which "
            "worker processes started with py_start_method='spawn' cannot import, and cannot "
            "be sent to them by value: uses the main script's global 'OFFSET', a object"
            ) in " ".join(run.stderr.split())


def test_pipeline_arguments_are_checked() -> None:
    with pytest.raises(errors.InvalidArgument, match=r"'py_start_method': got 'forkserver', "
                                                     r"expected one of 'fork', 'spawn'"):
        sample_pipeline(True, 2, "forkserver")
    with pytest.raises(errors.InvalidArgument, match="'py_num_workers': got 0"):
        sample_pipeline(True, 0)
