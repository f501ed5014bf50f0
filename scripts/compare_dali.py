"""Run the same pipelines in NVIDIA DALI (on the CPU) and in Conveyor, on generated images,
and compare their outputs value by value: ``warp_affine``, ``saturation``, ``equalize``.

    .venv/bin/python scripts/compare_dali.py --dali-python /path/to/dali-venv/bin/python

The DALI side runs in the interpreter given (one with ``nvidia.dali`` and numpy: DALI's
CPU pipelines need no GPU, ``device_id=None``); it is this script again, with ``--dali-out``,
writing its outputs to an ``.npz``. The Conveyor side runs here, in process
(``conveyor_server.Pipeline``). Each pipeline prints the largest absolute difference and
the share of values that differ; the exit status is 1 when any pipeline differs by more
than its allowance (1 LSB where the two round differently, 0 elsewhere).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 4
#: (name, allowed max difference); the graphs are in ``graphs``.
CASES: tuple[tuple[str, float], ...] = (
    ("warp_affine_linear", 1), ("warp_affine_nn", 0), ("warp_affine_fill_size", 1),
    ("warp_affine_input_matrix", 1), ("warp_affine_nn_fill_size", 0),
    ("warp_affine_forward_nn", 0), ("warp_affine_forward_linear", 1),
    ("warp_affine_float", 0.02), ("saturation", 1), ("saturation_fed", 1),
    ("saturation_float", 1e-3), ("equalize", 0),
)
#: Matrices with no output position exactly on a pixel edge of the input.
MATRIX = (0.93, 0.21, 1.3, -0.17, 1.08, -2.4)
MATRICES = ((0.93, 0.21, 1.3, -0.17, 1.08, -2.4), (0.71, -0.33, 12.6, 0.29, 0.84, -3.1),
            (1.17, 0.0, -4.35, 0.06, 0.88, 2.2), (0.5, 0.12, 9.9, -0.08, 1.31, 0.45))
FORWARD = (1.07, -0.13, -1.7, 0.11, 0.94, 2.35)
SATURATIONS = (0.0, 0.45, 1.6, 3.0)


def images(batch: int) -> list[np.ndarray]:
    """Generated RGB uint8 images of odd sizes: smooth ramps, noise, sharp edges, and a
    flat channel (equalize leaves it as it is)."""
    rng = np.random.default_rng(2024)
    out = []
    for i in range(batch):
        h, w = 37 + 11 * i, 53 - 5 * i
        y, x = np.mgrid[0:h, 0:w]
        ramp = np.stack([x * 255 // (w - 1), y * 255 // (h - 1), (x + y) % 256], axis=2)
        noise = rng.integers(0, 256, (h, w, 3))
        image = np.where(((x // 6 + y // 5) % 3 == 0)[..., None], noise, ramp)
        if i == 3:
            image[:, :, 1] = 90
        out.append(image.astype(np.uint8))
    return out


def graphs(fn: Any, types: Any, source: Any, matrices: Any, saturations: Any
           ) -> dict[str, Callable[[], Any]]:
    """The pipelines, the same code for both libraries (``fn``, ``types`` are DALI's or
    Conveyor's; ``source`` gives the images, ``matrices`` and ``saturations`` per-sample
    values)."""
    return {
        "warp_affine_linear": lambda: fn.warp_affine(source(), matrix=list(MATRIX)),
        "warp_affine_nn": lambda: fn.warp_affine(source(), matrix=list(MATRIX),
                                                 interp_type=types.INTERP_NN),
        "warp_affine_fill_size": lambda: fn.warp_affine(source(), matrix=list(MATRICES[1]),
                                                        size=(41, 60), fill_value=17.0),
        "warp_affine_input_matrix": lambda: fn.warp_affine(source(), matrices()),
        "warp_affine_nn_fill_size": lambda: fn.warp_affine(
            source(), matrices(), size=(50, 45), fill_value=200.0, interp_type=types.INTERP_NN),
        "warp_affine_forward_linear": lambda: fn.warp_affine(source(), matrix=list(FORWARD),
                                                             inverse_map=False),
        "warp_affine_forward_nn": lambda: fn.warp_affine(
            source(), matrix=list(FORWARD), inverse_map=False, interp_type=types.INTERP_NN),
        "warp_affine_float": lambda: fn.warp_affine(source(), matrix=matrices(),
                                                    dtype=types.FLOAT, fill_value=0.0),
        "saturation": lambda: fn.saturation(source(), saturation=0.45),
        "saturation_fed": lambda: fn.saturation(source(), saturation=saturations()),
        "saturation_float": lambda: fn.saturation(source(), saturation=1.6, dtype=types.FLOAT),
        "equalize": lambda: fn.equalize(source()),
    }


def run_dali(out: Path) -> None:
    from nvidia.dali import fn, pipeline_def, types

    data = images(BATCH)

    def source() -> Any:
        return fn.external_source(source=lambda: data, batch=True, layout="HWC")

    def matrices() -> Any:
        return fn.external_source(source=lambda: _MATS, batch=True)

    def saturations() -> Any:
        return fn.external_source(source=lambda: _SATS, batch=True)

    results = {}
    for name, graph in graphs(fn, types, source, matrices, saturations).items():
        pipe = pipeline_def(graph, batch_size=BATCH, num_threads=1, device_id=None)()
        pipe.build()
        (outputs,) = pipe.run()
        for i in range(BATCH):
            results[f"{name}/{i}"] = np.array(outputs[i])
    np.savez(out, **results)  # type: ignore[arg-type]


#: The per-sample values Conveyor's external sources read (a source is named by its
#: function, so each has one of its own).
_MATS = [np.asarray(m, dtype=np.float32).reshape(2, 3) for m in MATRICES]
_SATS = [np.asarray(s, dtype=np.float32) for s in SATURATIONS]


def sample_image(info: Any) -> np.ndarray:
    return images(BATCH)[info.idx_in_epoch % BATCH]


def sample_matrix(info: Any) -> np.ndarray:
    return _MATS[info.idx_in_epoch % BATCH]


def sample_saturation(info: Any) -> np.ndarray:
    return _SATS[info.idx_in_epoch % BATCH]


def run_conveyor() -> dict[str, list[np.ndarray]]:
    import conveyor_server
    from conveyor import fn, pipeline_def, types

    def source() -> Any:
        return fn.external_source(source=sample_image, batch=False, layout="HWC")

    def matrices() -> Any:
        return fn.external_source(source=sample_matrix, batch=False)

    def saturations() -> Any:
        return fn.external_source(source=sample_saturation, batch=False)

    results = {}
    for name, graph in graphs(fn, types, source, matrices, saturations).items():
        spec = pipeline_def(graph, batch_size=BATCH, num_threads=1, seed=1)()
        with conveyor_server.Pipeline(spec) as pipe:
            (outputs,) = pipe.run()
            results[name] = [np.array(outputs[i]) for i in range(BATCH)]
    return results


def compare(dali: dict[str, np.ndarray], ours: dict[str, list[np.ndarray]],
            cases: Sequence[tuple[str, float]] | None = None, batch: int = BATCH,
            align: Callable[[str, np.ndarray, np.ndarray], np.ndarray] | None = None) -> bool:
    """Print each case's largest difference and the share of values that differ; True when
    every case is within its allowance. ``align(name, dali, ours)`` may rewrite our sample
    first (values drawn by other generators)."""
    ok = True
    print(f"{'pipeline':28} {'max |diff|':>10} {'differ':>9}  allowed")
    for name, allowed in CASES if cases is None else cases:
        worst, differ, total = 0.0, 0, 0
        for i in range(batch):
            a, b = dali[f"{name}/{i}"], ours[name][i]
            if a.shape != b.shape or a.dtype != b.dtype:
                print(f"{name}: sample {i} is {b.shape} {b.dtype} here, {a.shape} {a.dtype} "
                      "in DALI")
                ok = False
                continue
            if align is not None:
                b = align(name, a, b)
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            worst = max(worst, float(diff.max(initial=0.0)))
            differ += int(np.count_nonzero(diff > (1e-6 if a.dtype.kind == "f" else 0)))
            total += diff.size
        passed = worst <= allowed
        ok &= passed
        print(f"{name:28} {worst:10.4g} {differ / max(total, 1):9.4%}  {allowed:g}"
              f"{'' if passed else '  OVER'}")
    return ok


def main_against_dali(script: str, doc: str, run_dali: Callable[[Path], None],
                      run_conveyor: Callable[[], dict[str, Any]],
                      compare: Callable[[dict[str, Any], dict[str, Any]], bool]) -> int:
    """A comparison script's command line: ``--dali-python`` runs ``script`` again under
    DALI's interpreter (``--dali-out``: its outputs as an .npz), then compares them with
    Conveyor's; exit status 0 when every pipeline is within its allowance."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--dali-python", help="an interpreter with nvidia.dali")
    parser.add_argument("--dali-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dali_out is not None:
        run_dali(args.dali_out)
        return 0
    if not args.dali_python:
        parser.error("--dali-python is required")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dali.npz"
        subprocess.run([args.dali_python, script, "--dali-out", str(out)], check=True)
        with np.load(out) as loaded:
            dali = dict(loaded)
    return 0 if compare(dali, run_conveyor()) else 1


if __name__ == "__main__":
    sys.exit(main_against_dali(__file__, __doc__ or "", run_dali, run_conveyor, compare))
