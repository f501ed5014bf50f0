"""The bytes of the GPU pipelines' first batches, as digests: one engine against another.

Runs ``bench.gpu``'s two pipelines (the seed notebook's rotate on "mixed" and "gpu", the
ResNet-50 training pipeline) in process and prints, as JSON, the SHA-256 of every output
of each of the first ``--batches`` batches, with the output's dtype and shape. It uses the
public API alone (``pipeline_def``, ``fn``, ``Pipeline.run``), so the same file measures
the engine on ``PYTHONPATH``, whichever that is: ``bench/gpu_check.sh`` runs it over the
working tree and over an earlier tree of the project (its baseline), then compares the two
files with ``--compare``: a change to the host's path must not change a byte.

With ``--device cpu`` the pipelines run on the CPU (decode, rotate and resize there), so
the plumbing can be tried on a machine without a GPU.

Run: python -m bench.gpu_digests --data DIR [--batches N] [--batch N] [--out FILE]
     python -m bench.gpu_digests --compare A.json B.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _pipelines(root: str, batch: int, device: str) -> dict[str, Any]:
    on_gpu = device == "gpu"
    decoder, ops = ("mixed", "gpu") if on_gpu else ("cpu", "cpu")
    device_id = 0 if on_gpu else None

    @pipeline_def(batch_size=batch, num_threads=4, seed=12, device_id=device_id,
                  enable_checkpointing=True)
    def seed_notebook() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, device=decoder, output_type=types.RGB)
        angles = fn.random.uniform(range=(-30.0, 30.0))
        return fn.rotate(images, angle=angles, fill_value=0, device=ops), labels, angles

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

    return {"seed notebook": seed_notebook(), "ResNet-50 training": resnet50_training()}


def _host(value: Any) -> np.ndarray:
    """A sample as a host array (a CuPy array is copied out)."""
    if hasattr(value, "get") and not isinstance(value, np.ndarray):
        value = value.get()
    return np.ascontiguousarray(np.asarray(value))


def digests(root: str, batch: int, batches: int, device: str) -> dict[str, list[list[str]]]:
    """Per pipeline, per batch, one line per output: its samples' dtype, shapes' digest and
    bytes' digest."""
    found: dict[str, list[list[str]]] = {}
    for name, spec in _pipelines(root, batch, device).items():
        pipe = Pipeline(spec)
        try:
            rows = found[name] = []
            for _ in range(batches):
                lines = []
                for output in pipe.run():
                    samples = [_host(s) for s in output]
                    shapes = hashlib.sha256(repr([s.shape for s in samples]).encode())
                    data = hashlib.sha256()
                    for s in samples:
                        data.update(s.tobytes())
                    lines.append(f"{samples[0].dtype} shapes {shapes.hexdigest()[:16]} "
                                 f"bytes {data.hexdigest()}")
                rows.append(lines)
        finally:
            pipe.close()
    return found


def compare(a: Path, b: Path) -> int:
    """0 when the two files hold the same digests; else 1, naming the first difference."""
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    if left.keys() != right.keys():
        print(f"different pipelines: {sorted(left)} and {sorted(right)}")
        return 1
    for name in left:
        for index, (x, y) in enumerate(zip(left[name], right[name], strict=True)):
            if x != y:
                print(f"{name}: batch {index} differs:\n  {a}: {x}\n  {b}: {y}")
                return 1
    print(f"the same bytes: {', '.join(f'{n} ({len(v)} batches)' for n, v in left.items())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, help="a folder of class folders of JPEGs")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--out", type=Path, help="write the JSON here (default: standard output)")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.data is None:
        p.error("--data is required unless --compare is given")
    text = json.dumps(digests(str(args.data), args.batch, args.batches, args.device), indent=1)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
