"""``client/examples/dali_classification_train.py``: a DALI training script (the structure
of DALI's PyTorch ResNet-50 example, ``DALIClassificationIterator`` over a
``@pipeline_def`` pipeline) whose imports say ``conveyor.dali``. It trains in process and
against a server on generated JPEGs, every epoch each sample once, and a run resumed from
its saved state (the iterator's checkpoints) goes on with the batches and the losses of
the uninterrupted run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.images import make_image_folder
from tests.support.servers import Start

EXAMPLE = Path(__file__).resolve().parents[2] / "client" / "examples" / \
    "dali_classification_train.py"
TRAIN_COUNTS = (5, 4, 6)


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dali_classification_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("dali-example")
    make_image_folder(root / "train", counts=TRAIN_COUNTS, size=(80, 96))
    make_image_folder(root / "val", counts=(3, 3), size=(80, 96))
    return root


def run(data: Path, *args: str) -> dict[str, Any]:
    seen: dict[str, Any] = example().main([str(data), "-b", "4", "--print-freq", "100", *args])
    return seen


def flat(steps: list[list[int]]) -> list[int]:
    return [label for step in steps for label in step]


def test_the_ported_script_trains_in_process_each_sample_once_an_epoch(data: Path) -> None:
    seen = run(data, "--epochs", "2")
    # 15 samples, batches of 4, PARTIAL: 4, 4, 4, 3 per epoch.
    assert [len(step) for step in seen["labels"]] == [4, 4, 4, 3] * 2
    every = sorted(k for k, count in enumerate(TRAIN_COUNTS) for _ in range(count))
    assert sorted(flat(seen["labels"][:4])) == every == sorted(flat(seen["labels"][4:]))
    assert seen["labels"][:4] != seen["labels"][4:]  # shuffled anew each epoch
    assert seen["epochs"] == [0, 1] and len(seen["top1"]) == 2


def test_a_resumed_run_goes_on_exactly_in_process(data: Path, tmp_path: Path) -> None:
    full = run(data, "--epochs", "2")
    state = tmp_path / "state.pt"
    first = run(data, "--epochs", "2", "--checkpoint", str(state), "--save-every", "6",
                "--steps", "6")
    assert first["labels"] == full["labels"][:6]
    rest = run(data, "--epochs", "2", "--resume", str(state))
    assert rest["labels"] == full["labels"][6:]
    assert rest["losses"] == pytest.approx(full["losses"][6:], rel=1e-5)


def test_the_ported_script_trains_against_a_server_and_resumes_there(
        start_server: Start, data: Path, tmp_path: Path) -> None:
    server = start_server(roots=[data])
    full = run(data, "--epochs", "2")
    remote = ["--server", server.address, "--epochs", "2"]
    state = tmp_path / "state.pt"
    first = run(data, *remote, "--run-id", "a", "--checkpoint", str(state), "--save-every",
                "5", "--steps", "5")
    assert first["labels"] == full["labels"][:5]  # the server's batches are the same
    assert first["losses"] == pytest.approx(full["losses"][:5], rel=1e-5)
    rest = run(data, *remote, "--run-id", "a", "--resume", str(state))
    assert rest["labels"] == full["labels"][5:]
    assert rest["losses"] == pytest.approx(full["losses"][5:], rel=1e-5)
