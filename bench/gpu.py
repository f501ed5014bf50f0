"""The GPU server: two pipelines on one GPU, in process and over gRPC on loopback.

- the seed notebook's pipeline on the GPU: ``decoders.image`` on "mixed" (one nvImageCodec
  call per batch), ``rotate`` by a uniform angle on "gpu";
- the ResNet-50 training pipeline: ``decoders.image_random_crop`` on "mixed" (the window
  decoded as a region), ``resize`` to 224x224 and ``crop_mirror_normalize`` to float16 CHW
  with a coin-flip mirror, on "gpu".

Each is measured in process with its outputs kept on the GPU (``Pipeline(spec,
device_outputs=True)``: CuPy arrays, as DALI's pipelines give them to a trainer in the same
process; the timing ends once the GPU has done every batch handed out), the same with two
batches in flight on compute streams of their own (``gpu_streams=2``), in process with its
outputs in host memory (``Pipeline.run``), and over gRPC (``conveyor.Client``, one stream
to a real server on loopback), on the data set of the other benchmarks (JPEGs about
470x405). Reported: images/s, the GPU's use (NVML through ``nvidia-ml-py``, else
``nvidia-smi``, sampled every 100 ms) and the host CPU used (cores busy, from the process
times of this process and of the server). Targets, ResNet-50 on one H100: >= 19,000
images/s in process on the GPU (DALI's CI figure), >= 17,000 in host memory, and over
gRPC >= 0.9 x in process.

The GPU operators (rotate, resize, crop_mirror_normalize on "gpu") come from the CUDA
operators' work; where one is missing on this server its pipeline is reported as not run,
naming the operator, and the benchmark exits with 3. On a machine without a GPU it says so
and exits with 2, measuring nothing.

Run: python -m bench.gpu [--quick] [--runs N] [--batch N] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import conveyor
from bench._shared import Server, machine, make_dataset, median, parse_args, spread, table
from conveyor import fn, pipeline_def, types
from conveyor.errors import ConveyorError
from conveyor_server import Pipeline
from conveyor_server.engine.device.devices import cuda_device_count

TARGET = 19_000
TARGET_HOST = 17_000
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _devices(device: str) -> tuple[str, str, int | None]:
    """(the decoders' device, the operators', the pipeline's device_id) for "gpu" or, to
    try a benchmark's plumbing without a GPU, "cpu"."""
    return ("mixed", "gpu", 0) if device == "gpu" else ("cpu", "cpu", None)


def seed_gpu(root: str, batch: int, device: str = "gpu") -> Any:
    decoder, ops, device_id = _devices(device)

    @pipeline_def(batch_size=batch, num_threads=4, seed=12, device_id=device_id,
                  enable_checkpointing=True)
    def seed_notebook() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB)
        angles = fn.random.uniform(range=(-30.0, 30.0))
        rotated = fn.rotate(images, angle=angles, fill_value=0, device=ops)
        return rotated, labels, angles

    return seed_notebook()


def resnet50(root: str, batch: int, device: str = "gpu") -> Any:
    decoder, ops, device_id = _devices(device)

    @pipeline_def(batch_size=batch, num_threads=4, seed=12, device_id=device_id,
                  enable_checkpointing=True)
    def resnet50_training() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device=decoder, output_type=types.RGB)
        images = fn.resize(images, size=(224, 224), device=ops)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mean=MEAN, std=STD, mirror=fn.random.coin_flip(),
                                          device=ops)
        return images, labels

    return resnet50_training()


ON_GPU, IN_HOST, STREAM = "in process, on the GPU", "in process", "gRPC stream"
#: Two batches in flight on compute streams of their own (``gpu_streams=2``).
ON_GPU_2 = "in process, on the GPU, 2 streams"

PIPELINES: dict[str, Callable[[str, int, str], Any]] = {"seed notebook": seed_gpu,
                                                   "ResNet-50 training": resnet50}


class GpuUse:
    """The GPU's utilisation, sampled every 100 ms while running (NVML, else nvidia-smi)."""

    def __init__(self) -> None:
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._read = self._nvml() or self._smi()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def _nvml() -> Callable[[], float] | None:
        try:
            import pynvml
            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no nvidia-ml-py or no NVML
            return None
        return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

    @staticmethod
    def _smi() -> Callable[[], float] | None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return None

        def read() -> float:
            out = subprocess.run([smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,"
                                  "nounits", "-i", "0"], capture_output=True, text=True,
                                 check=False, timeout=5)
            return float(out.stdout.strip() or "nan")
        return read

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            if self._read is not None:
                self._samples.append(self._read())

    def __enter__(self) -> GpuUse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def percent(self) -> str:
        if self._read is None:
            return "n/a"
        return f"{median(self._samples):.0f}%" if self._samples else "n/a"


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (or of ``pid``, from /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Measured:
    images_per_s: float
    gpu: str
    cores: float


def measure(step: Callable[[], object], batch: int, batches: int,
            server_pid: int | None = None, settle: Callable[[], None] | None = None
            ) -> Measured:
    """``settle``: waits until the work of every batch ``step`` returned is done (outputs
    handed out on the GPU, whose work the host does not wait for)."""
    for _ in range(3):  # warm-up: kernels, decoder state, the ring's buffers
        step()
    if settle is not None:
        settle()
    cpu0 = cpu_seconds() + (cpu_seconds(server_pid) if server_pid else 0.0)
    with GpuUse() as gpu:
        start = time.perf_counter()
        for _ in range(batches):
            step()
        if settle is not None:
            settle()
        elapsed = time.perf_counter() - start
    cpu1 = cpu_seconds() + (cpu_seconds(server_pid) if server_pid else 0.0)
    return Measured(batches * batch / elapsed, gpu.percent(), (cpu1 - cpu0) / elapsed)


def main(argv: list[str] | None = None) -> int:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
        p.add_argument("--json", type=Path, help="also write the figures here, as JSON")

    args = parse_args(__doc__ or "", extra, argv)
    if cuda_device_count() == 0:
        print("bench.gpu: this machine has no CUDA GPU (CuPy sees none, or the server's [gpu] "
              "extra is not installed): nothing was measured", file=sys.stderr)
        return 2
    print(machine())
    from conveyor_server.engine.identity.gpu_path import gpu_path

    print(f"GPU: {gpu_path(0).describe()}")
    data = make_dataset(args.data, args.images)
    root, batch = str(data), args.batch
    batches = 10 if args.quick else 40
    rows: list[tuple[str, ...]] = []
    missing: list[str] = []
    names = itertools.count()
    results: dict[tuple[str, str], list[Measured]] = {}
    failed: dict[tuple[str, str], str] = {}
    with Server(args.data) as server, conveyor.Client(server.address, timeout=120) as client:
        for label, make in PIPELINES.items():
            try:
                local = Pipeline(make(root, batch, "gpu"))
            except ConveyorError as exc:
                missing.append(f"{label}: {exc.message}")
                continue
            kept: dict[str, Pipeline] = {}
            for mode, lanes in ((ON_GPU, 1), (ON_GPU_2, 2)):
                try:
                    kept[mode] = Pipeline(make(root, batch, "gpu"), device_outputs=True,
                                          gpu_streams=lanes)
                except Exception as exc:  # the other modes are still measured
                    failed[(label, mode)] = f"{type(exc).__name__}: {exc}"
            name = f"gpu-bench-{next(names)}"
            remote = client.create(name, make(root, batch, "gpu"))
            import cupy

            # The stream outputs kept on the GPU are handed over on (the default): past
            # its work, the GPU has done every batch handed out.
            settle = cupy.cuda.Stream.null.synchronize
            try:
                for _ in range(args.runs):
                    for mode, step, pid, done in (
                            *((m, p.run, None, settle) for m, p in kept.items()),
                            (IN_HOST, local.run, None, None),
                            (STREAM, remote.run, server.pid, None)):
                        if (label, mode) in failed:
                            continue
                        try:
                            measured = measure(step, batch, batches, pid, done)
                        except Exception as exc:  # the other modes are still measured
                            failed[(label, mode)] = f"{type(exc).__name__}: {exc}"
                            continue
                        results.setdefault((label, mode), []).append(measured)
            finally:
                local.close()
                for pipe in kept.values():
                    pipe.close()
                remote.close()
                client.delete(name)
    for (label, mode), runs in results.items():
        rates = [m.images_per_s for m in runs]
        rows.append((label, mode, f"{median(rates):,.0f}", spread(rates, "{:,.0f}"),
                     runs[len(runs) // 2].gpu, f"{median([m.cores for m in runs]):.1f}"))
    table(rows, (f"batches of {batch}", "", "images/s", "spread", "GPU use", "host cores"))
    rn50 = {mode: median([m.images_per_s for m in runs])
            for (label, mode), runs in results.items() if label == "ResNet-50 training"}
    if rn50:
        on_gpu = max(rn50.get(ON_GPU, 0.0), rn50.get(ON_GPU_2, 0.0))
        in_host, grpc = rn50.get(IN_HOST, 0.0), rn50.get(STREAM, 0.0)
        print(f"ResNet-50 in process, on the GPU (the better of 1 and 2 streams): "
              f"{on_gpu:,.0f} images/s, "
              f"{on_gpu / TARGET:.2f} x the target of {TARGET:,}; in host memory "
              f"{in_host:,.0f}, {in_host / TARGET_HOST:.2f} x the target of {TARGET_HOST:,}; "
              f"over gRPC {grpc:,.0f} images/s, {grpc / max(in_host, 1.0):.2f} x in process "
              "(target 0.9)")
    for line in missing:
        print(f"not run: {line}", file=sys.stderr)
    for (label, mode), why in failed.items():
        print(f"failed: {label}, {mode}: {why}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({
            "batch": batch, "runs": args.runs, "not run": missing,
            "failed": [f"{label}, {mode}: {why}" for (label, mode), why in failed.items()],
            "figures": [{"pipeline": label, "mode": mode,
                         "images_per_s": [round(m.images_per_s) for m in runs],
                         "gpu_use": [m.gpu for m in runs],
                         "host_cores": [round(m.cores, 2) for m in runs]}
                        for (label, mode), runs in results.items()]}, indent=1))
    return 3 if missing or failed else 0


if __name__ == "__main__":
    sys.exit(main())
