"""``client/examples/dali_classification_train.py``: DALI's PyTorch ResNet-50 example, its
pipeline functions and iterator use as DALI writes them, whose imports say
``conveyor.dali``. DALI's pipeline records DALI's devices (the decoder's, the GPU operators
after ``.gpu()``) and, where a GPU is, trains in process and against a server with exact
resume; without one it says what to do. Its ``--cpu-only`` pipeline trains on generated
JPEGs anywhere, every epoch each sample once, and a run resumed from its saved state (the
iterator's checkpoints) goes on with the batches and the losses of the uninterrupted
run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conveyor.errors import DeviceUnavailable
from conveyor_server.engine.device.devices import cuda_device_count
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


#: The script's pipeline without a GPU, which this module's CPU tests train with.
CPU_ONLY = ("--cpu-only",)


def flat(steps: list[list[int]]) -> list[int]:
    return [label for step in steps for label in step]


def test_the_ported_script_trains_in_process_each_sample_once_an_epoch(data: Path) -> None:
    seen = run(data, *CPU_ONLY, "--epochs", "2")
    # 15 samples, batches of 4, PARTIAL: 4, 4, 4, 3 per epoch.
    assert [len(step) for step in seen["labels"]] == [4, 4, 4, 3] * 2
    every = sorted(k for k, count in enumerate(TRAIN_COUNTS) for _ in range(count))
    assert sorted(flat(seen["labels"][:4])) == every == sorted(flat(seen["labels"][4:]))
    assert seen["labels"][:4] != seen["labels"][4:]  # shuffled anew each epoch
    assert seen["epochs"] == [0, 1] and len(seen["top1"]) == 2


def resumes_in_process(data: Path, tmp_path: Path, *mode: str) -> None:
    full = run(data, *mode, "--epochs", "2")
    state = tmp_path / "state.pt"
    first = run(data, *mode, "--epochs", "2", "--checkpoint", str(state), "--save-every", "6",
                "--steps", "6")
    assert first["labels"] == full["labels"][:6]
    rest = run(data, *mode, "--epochs", "2", "--resume", str(state))
    assert rest["labels"] == full["labels"][6:]
    assert rest["losses"] == pytest.approx(full["losses"][6:], rel=1e-5)


def resumes_on_a_server(start_server: Start, data: Path, tmp_path: Path, *mode: str) -> None:
    server = start_server(roots=[data])
    full = run(data, *mode, "--epochs", "2")
    remote = [*mode, "--server", server.address, "--epochs", "2"]
    state = tmp_path / "state.pt"
    first = run(data, *remote, "--run-id", "a", "--checkpoint", str(state), "--save-every",
                "5", "--steps", "5")
    assert first["labels"] == full["labels"][:5]  # the server's batches are the same
    assert first["losses"] == pytest.approx(full["losses"][:5], rel=1e-5)
    rest = run(data, *remote, "--run-id", "a", "--resume", str(state))
    assert rest["labels"] == full["labels"][5:]
    assert rest["losses"] == pytest.approx(full["losses"][5:], rel=1e-5)


def test_a_resumed_run_goes_on_exactly_in_process(data: Path, tmp_path: Path) -> None:
    resumes_in_process(data, tmp_path, *CPU_ONLY)


def test_the_ported_script_trains_against_a_server_and_resumes_there(
        start_server: Start, data: Path, tmp_path: Path) -> None:
    resumes_on_a_server(start_server, data, tmp_path, *CPU_ONLY)


def devices(pipe: Any) -> list[tuple[str, str]]:
    return [(op.type, op.device) for op in pipe.spec.ops]


def test_dalis_pipeline_records_dalis_devices(data: Path) -> None:
    """No operator names its device but the decoders: each follows its input, as in DALI;
    ``.gpu()`` is the transfer (``copy`` on the GPU) that puts what follows there."""
    make = example().create_dali_pipeline
    common = {"batch_size": 4, "device_id": 0, "seed": 1, "data_dir": str(data / "train"),
              "crop": 64, "size": 72, "shard_id": 0, "num_shards": 1}
    assert devices(make(**common)) == [
        ("readers.file", "cpu"), ("decoders.image_random_crop", "mixed"), ("resize", "gpu"),
        ("random.coin_flip", "cpu"), ("crop_mirror_normalize", "gpu"), ("copy", "gpu")]
    validation = make(**common, dali_cpu=True, is_training=False)
    assert devices(validation) == [
        ("readers.file", "cpu"), ("decoders.image", "cpu"), ("resize", "cpu"),
        ("copy", "gpu"), ("crop_mirror_normalize", "gpu"), ("copy", "gpu")]
    resize = validation.spec.ops[2]
    assert list(resize.args["size"].floats.values) == [72.0]  # DALI's one number: both
    assert resize.args["interp_type"].s == "linear"  # INTERP_TRIANGULAR, as DALI resamples
    assert validation.spec.ops[4].args["mirror"].i == 0  # mirror=False


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
def test_dalis_pipeline_without_a_gpu_says_what_to_do(data: Path) -> None:
    with pytest.raises(DeviceUnavailable, match=r"copy: device='gpu' needs a CUDA device .*"
                       r"run the pipeline where a GPU is, or on the CPU \(device='cpu', and "
                       r"no .gpu\(\) transfers\)"):
        run(data, "--dali_cpu", "--epochs", "1")


#: DALI's own pipeline: decoded and resized on the CPU (``--dali_cpu``) or on the GPU, the
#: rest on the GPU, the model there too.
GPU_MODES = [pytest.param(("--dali_cpu", "--deterministic"), id="dali_cpu"),
             pytest.param(("--deterministic",), id="mixed")]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", GPU_MODES)
def test_dalis_pipeline_resumes_exactly_in_process_on_a_gpu(
        data: Path, tmp_path: Path, mode: tuple[str, ...]) -> None:
    resumes_in_process(data, tmp_path, *mode)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", GPU_MODES)
def test_dalis_pipeline_resumes_exactly_against_a_server_on_a_gpu(
        start_server: Start, data: Path, tmp_path: Path, mode: tuple[str, ...]) -> None:
    resumes_on_a_server(start_server, data, tmp_path, *mode)
