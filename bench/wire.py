"""Wire size: one trainer's stream of 224x224 images as uint8, float16 and float32.

The pipeline reads 224x224x3 uint8 images from ``.npy`` files (``fn.readers.numpy``, so
the server's work is small and the stream itself is measured) and sends them as they are
(uint8, HWC), or through ``crop_mirror_normalize`` to float16 or float32 CHW. Each is
measured in process (``Pipeline.run``: what the engine makes) and over gRPC on loopback
(``conveyor.Client``, one stream, the trainer consuming as fast as it can). A fourth
contender keeps uint8 on the wire and normalises to float16 on the trainer
(``conveyor.torch.crop_mirror_normalize`` on its CPU), as a trainer with a GPU would on
the GPU. A fifth takes the float16 stream as a PyTorch trainer does, as tensors from
``conveyor.torch.ConveyorDataset``. Batches of 64; images per second, and the bytes of one
image on the wire.

Target: >= 2,500 images/s per trainer stream in float16 on loopback.

Run: python -m bench.wire [--quick] [--runs N]
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import conveyor
from bench._shared import (
    Server,
    interleaved,
    machine,
    median,
    parse_args,
    process_cpu_s,
    spread,
    table,
)
from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline

SIZE = 224
BATCH = 64
FILES = 256
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
FORMATS = {"uint8": None, "float16": types.FLOAT16, "float32": types.FLOAT}
TARGET = 2500


def make_arrays(root: Path) -> Path:
    rng = np.random.default_rng(224)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(FILES):
        np.save(root / f"img_{i:04d}.npy",
                rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8))
    return root


def spec_for(root: Path, dtype: Any) -> Any:
    @pipeline_def(batch_size=BATCH, num_threads=2, prefetch_queue_depth=2, seed=7)
    def wire() -> Any:
        images = fn.readers.numpy(file_root=str(root), random_shuffle=True)
        if dtype is None:
            return images
        return fn.crop_mirror_normalize(images, mean=MEAN, std=STD, dtype=dtype,
                                        output_layout="CHW")
    return wire()


def images_per_second(step: Callable[[], object], batches: int,
                      server_pid: int | None = None) -> tuple[float, float]:
    """(images/s, CPU ms per image of this process and the server's, if any)."""
    def cpu() -> float:
        return process_cpu_s() + (process_cpu_s(server_pid) if server_pid else 0.0)

    step()
    step()
    used = cpu()
    start = time.perf_counter()
    for _ in range(batches):
        step()
    wall = time.perf_counter() - start
    images = batches * BATCH
    return images / wall, (cpu() - used) / images * 1e3


def main() -> None:
    args = parse_args(__doc__ or "")
    runs = args.runs or (2 if args.quick else 5)
    batches = 20 if args.quick else 60
    print(machine())
    import torch

    from conveyor.torch import ConveyorDataset, crop_mirror_normalize

    with tempfile.TemporaryDirectory() as tmp:
        root = make_arrays(Path(tmp) / "arrays")
        specs = {name: spec_for(root, dtype) for name, dtype in FORMATS.items()}
        local = {name: Pipeline(spec, data_roots=[tmp]) for name, spec in specs.items()}
        sizes = {name: sum(t.at(0).nbytes for t in local[name].run())
                 for name in FORMATS}
        with Server(Path(tmp)) as server, conveyor.Client(server.address, timeout=60) as c:
            remote = {name: c.create(f"wire-{name}", spec) for name, spec in specs.items()}

            def trainer_normalised() -> None:
                batch = torch.from_numpy(remote["uint8"].run()[0].as_array())
                crop_mirror_normalize(batch, mean=MEAN, std=STD, dtype=torch.float16)

            def rate(step: Callable[[], object],
                     pid: int | None = None) -> Callable[[], tuple[float, float]]:
                return lambda: images_per_second(step, batches, pid)

            contenders: dict[str, Callable[[], tuple[float, float]]] = {}
            for name in FORMATS:
                contenders[f"in process, {name}"] = rate(local[name].run)
                contenders[f"gRPC stream, {name}"] = rate(remote[name].run, server.pid)
            contenders["gRPC stream, uint8 + trainer-side float16"] = rate(trainer_normalised,
                                                                           server.pid)
            # The same float16 stream as a PyTorch trainer takes it: tensors from the dataset.
            dataset = ConveyorDataset([server.address], "wire-torch", specs["float16"])
            tensors = [iter(dataset)]
            contenders["gRPC stream, float16 as torch tensors (conveyor.torch)"] = rate(
                lambda: next(tensors[0]), server.pid)
            results = interleaved(contenders, runs)
            for stream in remote.values():
                stream.close()
            tensors.clear()  # (the generator, dropped, closes its stream)
        for engine in local.values():
            engine.close()
    rows = []
    for name, measures in results.items():
        fmt = name.split(", ", 1)[1].split(" ")[0]
        values, cpu = [m[0] for m in measures], [m[1] for m in measures]
        rows.append((name, f"{median(values):,.0f}", spread(values, "{:,.0f}"),
                     f"{median(cpu):.3f}", f"{sizes[fmt]:,}"))
    table(rows, ("224x224 images, batches of 64", "images/s", "spread", "CPU ms/image",
                 "bytes/image"))
    fp16 = median([m[0] for m in results["gRPC stream, float16"]])
    fp16_cpu = median([m[1] for m in results["gRPC stream, float16"]])
    print(f"float16 over gRPC: {fp16:,.0f} images/s per trainer stream, "
          f"{fp16 / TARGET:.2f} x the target of {TARGET:,}; server and trainer together "
          f"used {fp16_cpu:.3f} ms of CPU per image, so {os.cpu_count()} idle cores bound "
          f"the stream at {(os.cpu_count() or 1) * 1e3 / fp16_cpu:,.0f} images/s")


if __name__ == "__main__":
    main()
