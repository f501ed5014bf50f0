"""The GPU server's peers on the same files, in the same run: what the card does without us.

- **nvImageCodec, bare**: its batched decode of whole JPEGs, one ``Decoder.decode`` call per
  batch of encoded files already in memory (the hardware decoder first, as the engine's
  backend plan), into device memory. The ceiling for any decode-bound pipeline here.
- **torchvision on the GPU**: the ResNet-50 training pipeline as a PyTorch user writes it
  with torchvision alone: each batch's files read from disk, one batched
  ``torchvision.io.decode_jpeg(..., device="cuda")`` call, then per image the v2 transforms
  ``RandomResizedCrop(224)``, ``RandomHorizontalFlip`` and normalisation to float16, stacked
  into one CHW batch on the GPU.

Each prints images/s over ``--batches`` batches of ``--batch`` after a warm-up, the device
synchronised before the clock is read. Either is reported as not run, with the reason,
where its library is missing.

Run: python -m bench.gpu_peers --data DIR [--batch 256] [--batches 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gpu import MEAN, STD


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jpg"))


def _rate(step: Callable[[int], None], batch: int, batches: int, sync: Callable[[], None],
          warmup: int = 3) -> float:
    for i in range(warmup):
        step(i)
    sync()
    start = time.perf_counter()
    for i in range(batches):
        step(warmup + i)
    sync()
    return batches * batch / (time.perf_counter() - start)


def nvimgcodec_bare(files: list[Path], batch: int, batches: int) -> float:
    import cupy
    from nvidia import nvimgcodec as nv

    encoded = [f.read_bytes() for f in files]
    decoder = nv.Decoder(device_id=0, backends=[
        nv.Backend(nv.BackendKind.HW_GPU_ONLY, load_hint=0.65),
        nv.Backend(nv.BackendKind.GPU_ONLY), nv.Backend(nv.BackendKind.HYBRID_CPU_GPU)])
    streams = [nv.CodeStream(data) for data in encoded]
    cycle = itertools.cycle(range(0, len(streams) - batch + 1, batch) or [0])
    stream = cupy.cuda.Stream(non_blocking=True)

    def step(_: int) -> None:
        first = next(cycle)
        images = decoder.decode(streams[first:first + batch], cuda_stream=stream.ptr)
        if any(image is None for image in images):
            raise RuntimeError("nvImageCodec could not decode a file")

    return _rate(step, batch, batches, stream.synchronize)


def torchvision_gpu(files: list[Path], batch: int, batches: int) -> float:
    import torch
    import torchvision
    from torchvision.transforms import v2

    device = torch.device("cuda")
    transform = v2.Compose([
        v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32), v2.Normalize(MEAN, STD), v2.ToDtype(torch.float16)])
    torch.manual_seed(12)

    def step(i: int) -> None:
        first = (i * batch) % max(len(files) - batch + 1, 1)
        data = [torchvision.io.read_file(str(f)) for f in files[first:first + batch]]
        images = torchvision.io.decode_jpeg(data, device=device,
                                            mode=torchvision.io.ImageReadMode.RGB)
        torch.stack([transform(image) for image in images])

    return _rate(step, batch, batches, torch.cuda.synchronize)


PEERS: dict[str, Callable[[list[Path], int, int], float]] = {
    "nvImageCodec bare batched decode (whole images)": nvimgcodec_bare,
    "torchvision decode_jpeg on the GPU + v2 transforms (ResNet-50)": torchvision_gpu,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="a folder of class folders of JPEGs")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    files = _files(args.data)
    found: dict[str, Any] = {}
    for name, peer in PEERS.items():
        try:
            found[name] = round(peer(files, args.batch, args.batches))
            print(f"{found[name]:>9,} images/s  {name}")
        except Exception as exc:  # a missing library or device: said, not fatal
            found[name] = f"not run: {type(exc).__name__}: {exc}"
            print(f"{'not run':>9}  {name}: {type(exc).__name__}: {exc}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
