"""``fn.external_source`` served: callables registered on real servers stream over gRPC and
resume on another server byte for byte from any position, across epoch ends, in both
calling conventions; an unregistered source is INVALID_ARGUMENT and a raising one DATA_LOSS,
each naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.support.resume import assert_same_stream, run_across_epochs, run_batches
from tests.support.servers import ServerProcess, Start, client

REPO = Path(__file__).resolve().parents[2]
REGISTERED = ("tests.support.external_sources:samples", "tests.support.external_sources:batches",
              "tests.support.external_sources:failing")


def with_sources(start_server: Start, names: tuple[str, ...] = REGISTERED) -> ServerProcess:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return start_server(env={"PYTHONPATH": path, "CONVEYOR_EXTERNAL_SOURCES": ",".join(names)})


@pipeline_def(batch_size=4, num_threads=2, seed=9, enable_checkpointing=True)
def both_conventions() -> Any:
    """A per-sample source (epochs of 2 and 3 batches) and a per-batch one (3 and 4)."""
    images, labels = fn.external_source(source="tests.support.external_sources:samples",
                                        batch=False, num_outputs=2,
                                        dtype=[types.UINT8, types.INT32], layout=["HWC", ""])
    vectors = fn.external_source(source="tests.support.external_sources:batches", batch_info=True)
    angles = fn.random.uniform(range=(-10.0, 10.0))
    images = fn.rotate(images, angle=angles, fill_value=0)
    return images, labels, vectors, angles


def test_registered_sources_stream_and_resume_exactly_on_another_server(
        start_server: Start) -> None:
    a, b = with_sources(start_server), with_sources(start_server)
    spec = both_conventions()
    with Pipeline(spec) as local:  # in process the names are imported
        reference = run_batches(local, 16)
    saved = {}
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("features", spec)
        streamed = []
        for k in range(10):
            if k in (0, 1, 2, 4, 5, 7):  # both sides of epoch ends of either source
                saved[k] = pipe.checkpoint()
            streamed.extend(run_across_epochs(pipe, 1))
        assert_same_stream(reference[:10], streamed, "server A")
        for k, checkpoint in saved.items():
            restored = cb.restore(f"copy-{k}", checkpoint=checkpoint.id)
            assert_same_stream(reference[k:k + 6], run_across_epochs(restored, 6),
                               f"restored on B after {k} batches")
            restored.close()
        # A trainer ahead of its checkpoint: the position is found past the epoch ends.
        ahead = cb.restore("ahead", checkpoint=saved[0].id, consumed=11)
        assert_same_stream(reference[11:14], run_across_epochs(ahead, 3), "11 batches ahead")
    epochs = [(int(batch[1].at(0)[0]), int(batch[2].at(0)[0])) for batch in reference]
    assert epochs[:8] == [(0, 0), (0, 0), (1, 0), (1, 1), (1, 1), (2, 1), (2, 1), (3, 2)]


def test_unregistered_sources_are_refused_naming_the_field_and_the_source(
        start_server: Start) -> None:
    a = with_sources(start_server)
    plain = start_server()  # registers none

    @pipeline_def(batch_size=4, seed=1, enable_checkpointing=True)
    def pipeline(source: str) -> Any:
        return (fn.external_source(source=source, batch_info=True),)

    with client(a) as ca, client(plain) as cp:
        with pytest.raises(errors.SpecError) as refused:
            ca.create("unlisted", pipeline("tests.support.external_sources:iterations"))
        assert refused.value.code == "INVALID_ARGUMENT"
        assert "'tests.support.external_sources:iterations' (ops[0].args.source) is not " \
               "registered on this server" in refused.value.message
        pipe = ca.create("listed", pipeline("tests.support.external_sources:batches"))
        run_batches(pipe, 2)  # type: ignore[arg-type]
        checkpoint = pipe.checkpoint()
        with pytest.raises(errors.SpecError, match=r"'tests\.support\.external_sources:batches' "
                                                   r"\(ops\[0\]\.args\.source\) is not "
                                                   r"registered"):
            cp.restore("listed", checkpoint=checkpoint.id)
        assert pipe.run()[0].at(0)[1] == 2  # A still holds it: nothing was taken over


def test_a_raising_source_is_data_loss_naming_it(start_server: Start) -> None:
    a = with_sources(start_server)

    @pipeline_def(batch_size=4, seed=1)
    def pipeline() -> Any:
        return (fn.external_source(source="tests.support.external_sources:failing",
                                   batch_info=True),)

    with client(a) as ca:
        pipe = ca.create("failing", pipeline())
        assert [int(b[0].at(0)[0]) for b in run_batches(pipe, 2)] == [0, 1]  # type: ignore[arg-type]
        with pytest.raises(errors.ExternalSourceError) as failed:
            pipe.run()
    assert failed.value.code == "DATA_LOSS" and failed.value.reason == "EXTERNAL_SOURCE"
    assert failed.value.metadata["source"] == "tests.support.external_sources:failing"
    assert "'tests.support.external_sources:failing' raised OSError at epoch 0, iteration 2: the " \
           "feature store is unreachable" in failed.value.message


def test_a_source_that_does_not_import_stops_the_server_naming_it(tmp_path: Path) -> None:
    env = {**os.environ, "CONVEYOR_EXTERNAL_SOURCES": "tests.support.external_sources:samples,"
                                                      "tests.nowhere:feed"}
    done = subprocess.run([sys.executable, "-m", "conveyor_server.app.main", "--port", "0",
                           "--state-dir", str(tmp_path), "--data-root", str(tmp_path)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert "external_sources[1]: cannot import 'tests.nowhere:feed'" in done.stderr
