"""Run DALI's everyday operators (colour, layout, ``normalize``, ``random.choice``) in
NVIDIA DALI on the CPU and in Conveyor, on generated images, and compare their outputs
value by value.

    .venv/bin/python scripts/compare_dali_everyday.py --dali-python /path/to/dali-venv/bin/python

As ``compare_dali.py``: the DALI side is this script again in the interpreter given, writing
an ``.npz``; the Conveyor side runs here, in process. Each pipeline prints the largest
absolute difference and the share of values that differ; the exit status is 1 when any
differs by more than its allowance (1 LSB where the two round differently, 0 elsewhere).
``random.choice`` draws from keyed random numbers, not DALI's generator: its case compares
only what the draws may be (each a value of the list).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dali import compare as compare_outputs
from compare_dali import images, main_against_dali

BATCH = 4
#: Per-sample arguments, fed through external sources.
FACTORS = (0.0, 0.45, 1.6, 3.0)
HUES = (-170.0, -33.5, 12.25, 95.0)
SHAPES = ((720, 3), (30, 72), (-1, 5), (24, 90))
#: (name, allowed max difference): 1 in uint8 where a value computed in float32 lands
#: exactly on a half (DALI's CPU rounds it away from zero; Conveyor, as DALI's GPU, to even).
CASES: tuple[tuple[str, float], ...] = (
    ("brightness", 1), ("brightness_shift", 1), ("brightness_fed", 1),
    ("brightness_float", 1e-6), ("contrast", 1), ("contrast_center", 1), ("contrast_fed", 1),
    ("contrast_float", 1e-6), ("hue", 1), ("hue_fed", 1), ("hue_float", 1e-6),
    ("transpose", 0), ("transpose_reversed", 0), ("transpose_float", 0), ("reshape_shape", 0),
    ("reshape_rel_shape", 0), ("reshape_src_dims", 0), ("reshape_src_dims_rel", 0),
    ("reshape_fed", 0), ("cat", 0), ("cat_axis_name", 0), ("cat_three", 0), ("stack", 0),
    ("stack_interleave", 0), ("stack_negative", 0),
    # Computed statistics: a few float32 units in the last place (DALI's normalize reduces
    # for its variance in another order than its fn.reductions, whose order Conveyor uses).
    ("normalize", 1e-6), ("normalize_axes", 1e-6), ("normalize_names_ddof", 1e-6),
    ("normalize_given", 0), ("normalize_fed", 0), ("normalize_uint8", 0),
    ("normalize_epsilon_int16", 1), ("normalize_mean_only", 1e-6),
    ("normalize_float_input", 1e-6),
    ("choice_n", 0), ("choice_list_p", 0), ("choice_float_shape", 0),
)
#: The random.choice pipelines: the values a draw may take (3 in choice_list_p has p = 0).
CHOICES = {"choice_n": (0, 1, 2, 3, 4), "choice_list_p": (7, 11),
           "choice_float_shape": (0.5, 1.5, 2.5)}


def graphs(fn: Any, types: Any, source: Any, fed: Callable[[str], Any]
           ) -> dict[str, Callable[[], Any]]:
    """The pipelines, the same code for both libraries (``fn``, ``types`` are DALI's or
    Conveyor's; ``source`` gives the images, ``fed(name)`` per-sample values)."""
    def as_float() -> Any:
        return fn.cast(source(), dtype=types.FLOAT) / 255.0

    return {
        "brightness": lambda: fn.brightness(source(), brightness=1.37),
        "brightness_shift": lambda: fn.brightness(source(), brightness=0.8,
                                                  brightness_shift=0.15),
        "brightness_fed": lambda: fn.brightness(source(), brightness=fed("factors")),
        "brightness_float": lambda: fn.brightness(as_float(), brightness=1.2,
                                                  brightness_shift=-0.1),
        "contrast": lambda: fn.contrast(source(), contrast=1.7),
        "contrast_center": lambda: fn.contrast(source(), contrast=0.6, contrast_center=90.0),
        "contrast_fed": lambda: fn.contrast(source(), contrast=fed("factors")),
        "contrast_float": lambda: fn.contrast(as_float(), contrast=1.3, dtype=types.FLOAT),
        "hue": lambda: fn.hue(source(), hue=37.0),
        "hue_fed": lambda: fn.hue(source(), hue=fed("hues")),
        "hue_float": lambda: fn.hue(as_float(), hue=-120.0),
        "transpose": lambda: fn.transpose(source(), perm=[2, 0, 1]),
        "transpose_reversed": lambda: fn.transpose(source()),
        "transpose_float": lambda: fn.transpose(as_float(), perm=[1, 0, 2],
                                                transpose_layout=False),
        "reshape_shape": lambda: fn.reshape(source(), shape=[-1, 3]),
        "reshape_rel_shape": lambda: fn.reshape(fn.crop(source(), crop=(24, 30)),
                                                rel_shape=[0.5, -1]),
        "reshape_src_dims": lambda: fn.reshape(source(), src_dims=[-1, 1, 0, 2],
                                               layout="FWHC"),
        "reshape_src_dims_rel": lambda: fn.reshape(
            fn.crop(source(), crop=(24, 30)), src_dims=[2, 0, 1], rel_shape=[2.0, 0.5, 1.0]),
        "reshape_fed": lambda: fn.reshape(fn.crop(source(), crop=(24, 30)), fed("shapes")),
        "cat": lambda: fn.cat(source(), source()),
        "cat_axis_name": lambda: fn.cat(source(), fn.flip(source()), axis_name="C"),
        "cat_three": lambda: fn.cat(source(), source(), fn.flip(source()), axis=-2),
        "stack": lambda: fn.stack(source(), fn.flip(source())),
        "stack_interleave": lambda: fn.stack(source(), fn.flip(source()), axis=3,
                                             axis_name="F"),
        "stack_negative": lambda: fn.stack(source(), source(), fn.flip(source()), axis=-1),
        "normalize": lambda: fn.normalize(source()),
        "normalize_axes": lambda: fn.normalize(source(), axes=[0, 1]),
        "normalize_names_ddof": lambda: fn.normalize(source(), axis_names="HW", ddof=1),
        "normalize_given": lambda: fn.normalize(source(), mean=120.0, stddev=57.5),
        "normalize_fed": lambda: fn.normalize(source(), mean=fed("means"),
                                              stddev=fed("stddevs"), scale=2.0),
        "normalize_uint8": lambda: fn.normalize(source(), axes=[0, 1], scale=64.0,
                                                shift=128.0, dtype=types.UINT8),
        "normalize_epsilon_int16": lambda: fn.normalize(source(), axis_names="W", epsilon=4.0,
                                                        scale=1000.0, dtype=types.INT16),
        "normalize_mean_only": lambda: fn.normalize(source(), mean=100.0, axes=[0]),
        "normalize_float_input": lambda: fn.normalize(as_float(), axes=[1], shift=0.5),
        "choice_n": lambda: fn.random.choice(5),
        "choice_list_p": lambda: fn.random.choice([3, 7, 11], p=[0.0, 0.5, 0.5]),
        "choice_float_shape": lambda: fn.random.choice([0.5, 1.5, 2.5], shape=[64]),
    }


_FED: dict[str, list[np.ndarray]] = {
    "factors": [np.asarray(v, np.float32) for v in FACTORS],
    "hues": [np.asarray(v, np.float32) for v in HUES],
    "shapes": [np.array(s, dtype=np.int32) for s in SHAPES],
    "means": [np.array([[[m, m + 20, m - 30]]], np.float32) for m in (100.0, 90.0, 140.0, 120.0)],
    "stddevs": [np.array([[[s, s + 7, s - 9]]], np.float32) for s in (50.0, 33.0, 61.5, 20.0)]}


def run_dali(out: Path) -> None:
    from nvidia.dali import fn, pipeline_def, types

    data = images(BATCH)

    def source() -> Any:
        return fn.external_source(source=lambda: data, batch=True, layout="HWC")

    def fed(name: str) -> Any:
        return fn.external_source(source=lambda: _FED[name], batch=True)

    results = {}
    for name, graph in graphs(fn, types, source, fed).items():
        pipe = pipeline_def(graph, batch_size=BATCH, num_threads=1, device_id=None)()
        pipe.build()
        (outputs,) = pipe.run()
        for i in range(BATCH):
            results[f"{name}/{i}"] = np.array(outputs[i])
    np.savez(out, **results)  # type: ignore[arg-type]


def sample_image(info: Any) -> np.ndarray:
    return images(BATCH)[info.idx_in_epoch % BATCH]


def sample_factor(info: Any) -> np.ndarray:
    return _FED["factors"][info.idx_in_epoch % BATCH]


def sample_hue(info: Any) -> np.ndarray:
    return _FED["hues"][info.idx_in_epoch % BATCH]


def sample_mean(info: Any) -> np.ndarray:
    return _FED["means"][info.idx_in_epoch % BATCH]


def sample_stddev(info: Any) -> np.ndarray:
    return _FED["stddevs"][info.idx_in_epoch % BATCH]


def sample_shape(info: Any) -> np.ndarray:
    return _FED["shapes"][info.idx_in_epoch % BATCH]


def run_conveyor() -> dict[str, list[np.ndarray]]:
    import conveyor_server
    from conveyor import fn, pipeline_def, types

    def source() -> Any:
        return fn.external_source(source=sample_image, batch=False, layout="HWC")

    by_name = {"factors": sample_factor, "hues": sample_hue, "shapes": sample_shape,
               "means": sample_mean, "stddevs": sample_stddev}

    def fed(name: str) -> Any:
        return fn.external_source(source=by_name[name], batch=False)

    results = {}
    for name, graph in graphs(fn, types, source, fed).items():
        spec = pipeline_def(graph, batch_size=BATCH, num_threads=1, seed=1)()
        with conveyor_server.Pipeline(spec) as pipe:
            (outputs,) = pipe.run()
            results[name] = [np.array(outputs[i]) for i in range(BATCH)]
    return results


def _drawn_alike(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``random.choice``'s draws come from other generators: each one of the values, in
    DALI's output as in ours, counts as equal."""
    if name not in CHOICES:
        return b
    values = np.asarray(CHOICES[name], dtype=np.float64)
    drawn = np.isin(a, values) & np.isin(b, values)
    return np.where(drawn, a, -1).astype(a.dtype)


def compare(dali: dict[str, np.ndarray], ours: dict[str, list[np.ndarray]]) -> bool:
    return compare_outputs(dali, ours, CASES, BATCH, _drawn_alike)


if __name__ == "__main__":
    sys.exit(main_against_dali(__file__, __doc__ or "", run_dali, run_conveyor, compare))
