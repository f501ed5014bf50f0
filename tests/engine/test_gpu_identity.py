"""The GPU path in the engine identity: a GPU operator's checkpoint restores only on the same
GPU model, driver, CUDA runtime, decoder libraries and decode backends. Checked here by
constructing identities, as two GPU servers would write them."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import EngineMismatch
from conveyor.v1 import checkpoint_pb2
from conveyor_server.engine.identity import checkpoint as ckpt
from conveyor_server.engine.identity import engine_id
from conveyor_server.engine.identity.gpu_path import GpuPath, cuda_version, nvjpeg_version

H100 = GpuPath("NVIDIA H100 80GB HBM3", "9.0", "570.86.15 (CUDA 12.8)", "12.6", "0.9.0",
               "12.4.0").describe("op 1: hw_gpu_only 0.65, gpu_only, hybrid_cpu_gpu, cpu_only")
A100 = GpuPath("NVIDIA A100-SXM4-80GB", "8.0", "570.86.15 (CUDA 12.8)", "12.6", "0.9.0",
               "12.4.0").describe("op 1: hw_gpu_only 0.65, gpu_only, hybrid_cpu_gpu, cpu_only")
DIGEST = b"\x11" * 12


@pipeline_def(batch_size=2, seed=1, enable_checkpointing=True, device_id=0)
def mixed(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    return fn.decoders.image(jpegs, device="mixed"), labels


@pipeline_def(batch_size=2, seed=1, enable_checkpointing=True)
def on_cpu(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    return fn.decoders.image(jpegs), labels


def identity(gpu: str, *keys: str, digest: bytes = DIGEST) -> checkpoint_pb2.EngineId:
    return checkpoint_pb2.EngineId(
        decoder="nvimgcodec 0.9.0; nvjpeg 12.4.0", warp="opencv 5; numpy 2", key_schedule=1,
        output_version=engine_id.OUTPUT_VERSION, cpu="x86_64", gpu=gpu,
        ops=[checkpoint_pb2.OpBehaviour(key=k, digest=digest) for k in keys])


def test_a_gpu_operator_is_refused_on_another_gpu_model_naming_it() -> None:
    keys = ("decoders.image@gpu", "readers.file@cpu")
    why = engine_id.difference(identity(H100, *keys), identity(A100, *keys))
    assert why is not None
    assert why.startswith("operator 'decoders.image' (decoders.image@gpu) runs on another GPU "
                          "path on this server")
    assert "NVIDIA H100 80GB HBM3 (sm 9.0)" in why and "NVIDIA A100-SXM4-80GB (sm 8.0)" in why
    # Through the checkpoint check a restore runs: FAILED_PRECONDITION naming the operator.
    spec = mixed("/data").spec
    body = checkpoint_pb2.CheckpointBody(spec=spec, engine=identity(H100, *keys))
    with pytest.raises(EngineMismatch, match="operator 'decoders.image'") as refused:
        ckpt.verify_against(body, spec, identity(A100, *keys), {})
    assert refused.value.code == "FAILED_PRECONDITION"


def test_another_driver_or_library_or_backend_plan_is_another_gpu_path() -> None:
    keys = ("decoders.image@gpu",)
    for other in (H100.replace("570.86.15", "575.51.03"), H100.replace("nvJPEG 12.4.0",
                                                                       "nvJPEG 12.3.5"),
                  H100.replace("hw_gpu_only 0.65", "hw_gpu_only 0.9")):
        why = engine_id.difference(identity(H100, *keys), identity(other, *keys))
        assert why is not None and "runs on another GPU path" in why, other


def test_the_same_gpu_path_and_digests_restore() -> None:
    keys = ("decoders.image@gpu", "readers.file@cpu")
    assert engine_id.difference(identity(H100, *keys), identity(H100, *keys)) is None


def test_other_bytes_on_the_same_gpu_path_are_refused_by_the_digest() -> None:
    keys = ("decoders.image@gpu",)
    why = engine_id.difference(identity(H100, *keys), identity(H100, *keys, digest=b"\2" * 12))
    assert why is not None and "computes other bytes on this server" in why


def test_a_cpu_pipeline_ignores_the_gpu() -> None:
    """A CPU pipeline's checkpoint restores on a GPU server, and the other way round."""
    keys = ("decoders.image@cpu", "readers.file@cpu")
    assert engine_id.difference(identity("", *keys), identity(H100, *keys)) is None
    assert engine_id.gpu_description(on_cpu("/data").spec) == ""


def test_the_gpu_path_in_words() -> None:
    assert cuda_version(12060) == "12.6" and cuda_version(13000) == "13.0"
    assert H100 == ("NVIDIA H100 80GB HBM3 (sm 9.0); driver 570.86.15 (CUDA 12.8); CUDA runtime "
                    "12.6; nvImageCodec 0.9.0; nvJPEG 12.4.0; decode backends op 1: hw_gpu_only "
                    "0.65, gpu_only, hybrid_cpu_gpu, cpu_only")


def test_the_decoder_libraries_of_a_mixed_pipeline_are_read_from_the_loaded_libraries() -> None:
    pytest.importorskip("nvidia.nvimgcodec")
    # The nvJPEG the test extra pins (nvidia-nvjpeg 13.3.2.43), asked through its own API.
    assert nvjpeg_version() == "13.3.2"
    decoder, _ = engine_id.libraries(mixed("/data").spec)
    assert decoder == "nvimgcodec 0.9.0; nvjpeg 13.3.2"
    assert engine_id.libraries(on_cpu("/data").spec)[0].startswith("opencv ")
