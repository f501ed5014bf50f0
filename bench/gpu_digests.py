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

from bench.gpu import PIPELINES
from conveyor_server import Pipeline


def _host(value: Any) -> np.ndarray:
    """A sample as a host array (a CuPy array is copied out)."""
    if hasattr(value, "get") and not isinstance(value, np.ndarray):
        value = value.get()
    return np.ascontiguousarray(np.asarray(value))


def digests(root: str, batch: int, batches: int, device: str) -> dict[str, list[list[str]]]:
    """Per pipeline, per batch, one line per output: its samples' dtype, shapes' digest and
    bytes' digest."""
    found: dict[str, list[list[str]]] = {}
    for name, make in PIPELINES.items():
        spec = make(root, batch, device)
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
