"""python_function: a function run per sample or per batch in a pipeline, in process (any
callable) and by name; several outputs, layouts; the per-sample and batch forms give the
same bytes; a server's registry refuses a function it does not list, naming the argument;
exact resume through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server import Pipeline
from conveyor_server.engine.stages.source_callables import ExternalSources
from tests.support.images import make_image_folder
from tests.support.resume import assert_resume_exact, run_batches

PROBE = "conveyor_server.engine.ops.python.python_function:probe_function"


def mirrored(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[:, ::-1])


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x[..., :1], x.sum(axis=2, dtype=np.int32)


def per_batch(xs: list[np.ndarray]) -> list[np.ndarray]:
    return [x // 2 for x in xs]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("data") / "imgs", counts=(3, 4))


def pipeline(root: str, **options: Any) -> Any:
    @pipeline_def(batch_size=3, seed=2, enable_checkpointing=True, **options)
    def graph() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.resize(fn.decoders.image(jpegs), size=(12, 14))
        flipped = fn.python_function(images, function=mirrored)
        first, total = fn.python_function(images, function=split, num_outputs=2,
                                          output_layouts=["HWC", "HW"])
        halved = fn.python_function(images, function=per_batch, batch_processing=True)
        named = fn.python_function(images, function=PROBE)
        return images, flipped, first, total, halved, named, labels

    return graph()


@pytest.mark.parametrize("batch_ops", [True, False])
def test_outputs_in_process(data: Path, batch_ops: bool) -> None:
    spec = pipeline(str(data))
    if not batch_ops:  # batch_processing runs in the batch form only
        with pytest.raises(InvalidArgument, match="batch_processing=True"), \
                Pipeline(spec, batch_ops=False) as pipe:
            pipe.run()
        return
    with Pipeline(spec) as pipe:
        (batch,) = run_batches(pipe, 1)
    images, flipped, first, total, halved, named, _ = batch
    for i in range(3):
        assert np.array_equal(flipped[i], images[i][:, ::-1])
        assert np.array_equal(first[i], images[i][..., :1])
        assert np.array_equal(total[i], images[i].sum(axis=2, dtype=np.int32))
        assert np.array_equal(halved[i], images[i] // 2)
        assert np.array_equal(named[i], images[i][:, ::-1].astype(np.int32) * 3 - 7)


def test_exact_resume_through_python_functions(data: Path) -> None:
    assert_resume_exact(pipeline(str(data)), 2, 3)


def test_spec_names_the_function_and_a_server_registry_refuses_others() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def one() -> Any:
        return fn.python_function(fn.random.uniform(shape=(2,)), function=mirrored)

    (op,) = [o for o in one().spec.ops if o.type == "python_function"]
    assert op.args["function"].s == f"{__name__}:mirrored"
    registry = ExternalSources({})
    with pytest.raises(SpecError, match="function.*not registered on this server"):
        registry.resolve(op.args["function"].s, 1, "python_function", "function")
    found = ExternalSources.configured([PROBE]).resolve(PROBE, 1, "python_function",
                                                        "function")
    assert found.__name__ == "probe_function"
    with pytest.raises(SpecError, match="function.*is required"):
        fn.python_function(function=None)


def test_a_pipeline_with_a_servers_registry_runs_only_registered_functions(data: Path) -> None:
    @pipeline_def(batch_size=2, seed=1)
    def named() -> Any:
        jpegs, _ = fn.readers.file(file_root=str(data))
        return fn.python_function(fn.decoders.image(jpegs), function=PROBE)

    spec = named()
    with pytest.raises(SpecError, match="'function'.*not registered on this server"):
        Pipeline(spec, sources=ExternalSources({}))
    with Pipeline(spec, sources=ExternalSources.configured([PROBE])) as pipe:
        (out,) = pipe.run()
        assert np.asarray(out[0]).dtype == np.int32
