"""Conveyor's ``fn.reductions.*`` and ``fn.transforms.*`` against DALI's, byte for byte.

The same pipeline definitions run in NVIDIA DALI on the CPU (``device_id=None``) and in
Conveyor (in process): each case below is written once against a ``fn`` module, the port
being the import. The inputs are made here, saved, and fed to both through
``external_source`` (per-sample arguments too, so that random values are the same in both);
DALI runs in its own interpreter (``--dali-python``: a virtual environment with
``nvidia-dali-cuda120`` 2.4, numpy), which runs this file with ``--emit``.

Each output is compared: equal bytes, or else the largest difference in units in the last
place (floats) or in values. docs/porting-from-dali.md records the results.

Run: python -m bench.dali_reductions --dali-python /path/to/dali-venv/bin/python
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 16
Case = Callable[[Any, Any, Callable[[str], Any]], Any]


# -- inputs ------------------------------------------------------------------------------


def make_inputs() -> dict[str, list[np.ndarray]]:
    """Each input's batch: images of odd extents past the reduction's leaf size, values
    that float32 sums round, integers past float32's exact range."""
    rng = np.random.default_rng(2024)
    shapes = [(67, 45, 3), (31, 33, 3), (5, 129, 3), (100, 1, 3)]

    def batch(make: Callable[[tuple[int, ...]], np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(make(shapes[i % len(shapes)])) for i in range(BATCH)]

    out: dict[str, list[np.ndarray]] = {
        "u8": batch(lambda s: rng.integers(0, 256, s).astype(np.uint8)),
        "i8": batch(lambda s: rng.integers(-128, 128, s).astype(np.int8)),
        "u16": batch(lambda s: rng.integers(0, 65536, s).astype(np.uint16)),
        "i16": batch(lambda s: rng.integers(-32768, 32768, s).astype(np.int16)),
        "i32": batch(lambda s: rng.integers(-2 ** 31, 2 ** 31, s, dtype=np.int64)
                     .astype(np.int32)),
        "u32": batch(lambda s: rng.integers(0, 2 ** 32, s, dtype=np.uint64).astype(np.uint32)),
        "i64": batch(lambda s: rng.integers(-2 ** 40, 2 ** 40, s, dtype=np.int64)),
        "f32": batch(lambda s: (rng.standard_normal(s) * 100 + 3).astype(np.float32)),
        "f32_pos": batch(lambda s: rng.random(s, dtype=np.float32)),
        # per-sample transform arguments
        "angle": [np.asarray(a, dtype=np.float32) for a in rng.uniform(-180, 180, BATCH)],
        "vec2": [rng.uniform(-50, 50, 2).astype(np.float32) for _ in range(BATCH)],
        "vec2b": [rng.uniform(0.1, 3, 2).astype(np.float32) for _ in range(BATCH)],
        "vec3": [rng.uniform(-5, 5, 3).astype(np.float32) for _ in range(BATCH)],
        "shear_angles": [rng.uniform(-80, 80, 2).astype(np.float32) for _ in range(BATCH)],
        "matrix": [rng.uniform(-3, 3, (2, 3)).astype(np.float32) for _ in range(BATCH)],
        "matrix3": [rng.uniform(-3, 3, (3, 4)).astype(np.float32) for _ in range(BATCH)],
    }
    return out


# -- cases -------------------------------------------------------------------------------

REDUCE_TYPES = ("u8", "i8", "u16", "i16", "i32", "u32", "i64", "f32")
AXES: dict[str, dict[str, Any]] = {
    "all": {}, "hw": {"axes": (0, 1)}, "c": {"axes": 2}, "hc_keep": {"axes": (0, 2),
                                                                       "keep_dims": True},
    "h": {"axes": 0}, "none": {"axes": ()}, "names_wc": {"axis_names": "WC"},
}


def _reduction(kind: str, src: str, axes: dict[str, Any], extra: dict[str, Any]) -> Case:
    def case(fn: Any, types: Any, feed: Callable[[str], Any]) -> Any:
        x = feed(src)
        kwargs = {**axes, **extra}
        if "dtype" in kwargs:
            kwargs["dtype"] = getattr(types, kwargs["dtype"])
        if kind in ("std_dev", "variance"):
            mean = fn.reductions.mean(x, **{k: v for k, v in axes.items() if k != "keep_dims"})
            return getattr(fn.reductions, kind)(x, mean, **kwargs)
        return getattr(fn.reductions, kind)(x, **kwargs)
    return case


def reduction_cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for kind in ("min", "max", "sum", "mean", "mean_square", "rms", "std_dev", "variance"):
        for src in REDUCE_TYPES:
            for name, axes in AXES.items():
                if kind in ("std_dev", "variance") and name == "none":
                    continue
                cases[f"{kind}/{src}/{name}"] = _reduction(kind, src, axes, {})
        cases[f"{kind}/f32_pos/all"] = _reduction(kind, "f32_pos", {}, {})
    for kind, src, dtype in (("sum", "u8", "FLOAT"), ("sum", "u8", "UINT8"),
                             ("sum", "i16", "FLOAT"), ("sum", "i32", "INT32"),
                             ("mean", "u8", "UINT8"), ("mean", "i16", "INT16"),
                             ("mean_square", "u8", "UINT64"), ("mean_square", "i32", "INT64"),
                             ("rms", "u16", "UINT16")):
        for name in ("all", "hw"):
            cases[f"{kind}/{src}/{name}/{dtype}"] = _reduction(kind, src, AXES[name],
                                                               {"dtype": dtype})
    for kind in ("std_dev", "variance"):
        cases[f"{kind}/f32/hw/ddof1"] = _reduction(kind, "f32", AXES["hw"], {"ddof": 1})
    return cases


def transform_cases() -> dict[str, Case]:
    def c(make: Callable[[Any, Callable[[str], Any]], Any]) -> Case:
        return lambda fn, types, feed: make(fn, feed)

    return {
        "translation": c(lambda fn, feed: fn.transforms.translation(offset=[3.7, -1.1])),
        "translation/fed": c(lambda fn, feed: fn.transforms.translation(offset=feed("vec2"))),
        "translation/3d": c(lambda fn, feed: fn.transforms.translation(offset=[1.5, 2, -3])),
        "translation/input": c(lambda fn, feed: fn.transforms.translation(
            feed("matrix"), offset=feed("vec2"))),
        "translation/input_rev": c(lambda fn, feed: fn.transforms.translation(
            feed("matrix"), offset=feed("vec2"), reverse_order=True)),
        "scale": c(lambda fn, feed: fn.transforms.scale(scale=[1.5, 0.3], center=[100.3, 7.7])),
        "scale/fed": c(lambda fn, feed: fn.transforms.scale(scale=feed("vec2b"),
                                                            center=feed("vec2"))),
        "scale/ndim": c(lambda fn, feed: fn.transforms.scale(scale=0.7, ndim=2,
                                                             center=[3.3, 1.1])),
        "scale/input": c(lambda fn, feed: fn.transforms.scale(feed("matrix"), scale=1.3)),
        "scale/3d": c(lambda fn, feed: fn.transforms.scale(scale=[1.1, 0.9, 2.3],
                                                           center=[1, 2, 3.3])),
        "rotation": c(lambda fn, feed: fn.transforms.rotation(angle=feed("angle"))),
        "rotation/center": c(lambda fn, feed: fn.transforms.rotation(
            angle=feed("angle"), center=[320.5, 240.5])),
        "rotation/center_fed": c(lambda fn, feed: fn.transforms.rotation(
            angle=feed("angle"), center=feed("vec2"))),
        "rotation/const": c(lambda fn, feed: fn.transforms.rotation(angle=30.0)),
        "rotation/input": c(lambda fn, feed: fn.transforms.rotation(
            feed("matrix"), angle=feed("angle"), center=[10.5, 7.25])),
        "rotation/input_rev": c(lambda fn, feed: fn.transforms.rotation(
            feed("matrix"), angle=feed("angle"), reverse_order=True)),
        "rotation/3d": c(lambda fn, feed: fn.transforms.rotation(
            angle=feed("angle"), axis=feed("vec3"), center=[1.0, -2.0, 0.5])),
        "rotation/3d_axis": c(lambda fn, feed: fn.transforms.rotation(
            angle=feed("angle"), axis=[0.0, -3.0, 0.0])),
        "rotation/3d_input": c(lambda fn, feed: fn.transforms.rotation(
            feed("matrix3"), angle=feed("angle"), axis=[1.0, 1.0, 0.0])),
        "shear": c(lambda fn, feed: fn.transforms.shear(shear=[0.3, -0.7], center=[5.5, 7.25])),
        "shear/angles": c(lambda fn, feed: fn.transforms.shear(angles=feed("shear_angles"))),
        "shear/angles_center": c(lambda fn, feed: fn.transforms.shear(
            angles=feed("shear_angles"), center=feed("vec2"))),
        "shear/3d": c(lambda fn, feed: fn.transforms.shear(
            angles=[10.0, 20.0, -30.0, 40.0, 5.0, -6.0], center=[1, 2, 3])),
        "shear/input": c(lambda fn, feed: fn.transforms.shear(feed("matrix"),
                                                              shear=[0.3, 0.1])),
        "crop": c(lambda fn, feed: fn.transforms.crop(
            from_start=[10.0, 20.0], from_end=[110.0, 220.0], to_start=-1.0, to_end=1.0)),
        "crop/fed": c(lambda fn, feed: fn.transforms.crop(
            from_start=feed("vec2"), from_end=feed("vec2b"), absolute=True)),
        "crop/default": c(lambda fn, feed: fn.transforms.crop()),
        "crop/input": c(lambda fn, feed: fn.transforms.crop(
            feed("matrix"), to_start=[0.3, 0.1], to_end=[7.7, 3.3])),
        "combine": c(lambda fn, feed: fn.transforms.combine(
            feed("matrix"), fn.transforms.rotation(angle=feed("angle")),
            fn.transforms.translation(offset=feed("vec2")))),
        "combine/rev": c(lambda fn, feed: fn.transforms.combine(
            feed("matrix"), fn.transforms.scale(scale=feed("vec2b")), reverse_order=True)),
    }


def all_cases() -> dict[str, Case]:
    return {**{f"reductions.{k}": v for k, v in reduction_cases().items()},
            **{f"transforms.{k}": v for k, v in transform_cases().items()}}


# -- running -------------------------------------------------------------------------------


def _source(key: str, values: list[np.ndarray]) -> Callable[..., list[np.ndarray]]:
    def source(info: Any = None) -> list[np.ndarray]:
        return list(values)
    # In process, Conveyor keeps an external source's callable by its qualified name: one
    # name per input, so that two inputs of one pipeline do not share a callable.
    source.__qualname__ = f"feed_{key}"
    return source


def run_all(fn: Any, types: Any, pipeline_def: Any, inputs: dict[str, list[np.ndarray]],
            **pipe_args: Any) -> dict[str, Any]:
    """Every case's outputs (a list of arrays), or the error's last line."""
    results: dict[str, Any] = {}
    for name, case in all_cases().items():
        def feeder(key: str) -> Any:
            values = inputs[key]
            layout = "HWC" if values[0].ndim == 3 else None
            return fn.external_source(source=_source(key, values), batch=True, layout=layout)

        @pipeline_def(batch_size=BATCH, num_threads=2, seed=1, **pipe_args)
        def pipe(case: Case = case) -> Any:
            return case(fn, types, feeder)

        try:
            p = pipe()
            p.build()
            (out,) = p.run()
            results[name] = [np.array(out[i]) for i in range(BATCH)]
        except Exception as error:
            lines = [s for s in str(error).splitlines() if s.strip()]
            results[name] = f"{type(error).__name__}: {lines[-1] if lines else ''}"[:300]
    return results


def emit(inputs_path: str, out_path: str) -> None:
    """In DALI's interpreter: run every case, save the outputs."""
    from nvidia.dali import fn, pipeline_def, types

    loaded = np.load(inputs_path, allow_pickle=True)["inputs"].item()
    results = run_all(fn, types, pipeline_def, loaded, device_id=None)
    np.save(out_path, np.array(results, dtype=object), allow_pickle=True)


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in float32 units in the last place (NaN equal to NaN)."""
    both_nan = np.isnan(a) & np.isnan(b)
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)  # monotonic integer order
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    diff = np.where(both_nan, 0, np.abs(ia - ib))
    return int(diff.max()) if diff.size else 0


def compare(ours: Any, theirs: Any) -> str:
    if isinstance(ours, str) or isinstance(theirs, str):
        if isinstance(ours, str) and isinstance(theirs, str):
            return "both refuse"
        return f"DIFFER: conveyor {ours if isinstance(ours, str) else 'runs'}; " \
               f"DALI {theirs if isinstance(theirs, str) else 'runs'}"
    worst_ulp, worst_abs, equal = 0, 0.0, True
    for a, b in zip(ours, theirs, strict=True):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"DIFFER: conveyor {a.dtype}{a.shape}, DALI {b.dtype}{b.shape}"
        if a.tobytes() == b.tobytes():
            continue
        equal = False
        if a.dtype.kind == "f":
            worst_ulp = max(worst_ulp, ulps(a, b))
            finite = np.isfinite(a) & np.isfinite(b)
            worst_abs = max(worst_abs, float(np.abs(a[finite].astype(np.float64)
                                                    - b[finite]).max(initial=0)))
        else:
            worst_abs = max(worst_abs, float(np.abs(a.astype(np.float64) - b).max()))
    if equal:
        return "equal"
    return f"max {worst_ulp} ulp, max abs {worst_abs:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dali-python", default=".bench-venv/bin/python",
                        help="an interpreter with nvidia.dali (default: the venv "
                        "`make bench-resnet50` installs DALI into)")
    parser.add_argument("--emit", nargs=2, metavar=("INPUTS", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--all", action="store_true", help="print every case, not only "
                        "those that differ")
    args = parser.parse_args()
    if args.emit:
        emit(*args.emit)
        return
    from conveyor.dali import fn, pipeline_def, types

    inputs = make_inputs()
    with tempfile.TemporaryDirectory() as tmp:
        inputs_path, out_path = Path(tmp) / "inputs.npz", Path(tmp) / "dali.npy"
        np.savez(inputs_path, inputs=np.array(inputs, dtype=object))
        subprocess.run([args.dali_python, __file__, "--emit", str(inputs_path),
                        str(out_path)], check=True, stderr=subprocess.DEVNULL)
        theirs = np.load(out_path, allow_pickle=True).item()
    ours = run_all(fn, types, pipeline_def, inputs)
    counts: dict[str, int] = {}
    for name in all_cases():
        verdict = compare(ours[name], theirs[name])
        kind = verdict.split(":")[0].split(",")[0] if verdict[0] in "bDe" else "within"
        counts[kind] = counts.get(kind, 0) + 1
        if args.all or verdict != "equal":
            print(f"{name:45s} {verdict}")
    print("summary:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    sys.exit(1 if counts.get("DIFFER") else 0)


if __name__ == "__main__":
    main()
