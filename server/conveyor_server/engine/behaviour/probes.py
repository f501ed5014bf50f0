"""The canonical probe set: for every operator, random source and reader order, the cases
that take each of its code paths.

An operator probe returns ``Case``s (constant arguments, and samples: inputs plus
per-sample argument values); the measurement builds the operator from the arguments as
the engine does and runs every sample, in each form it is registered in. A source probe
returns arrays directly (draws, orders). An operator whose output depends on an argument
that selects a different implementation (an interpolation) declares it as its ``variant``:
each value is probed and digested apart, so a pipeline depends only on the paths it uses.

Every operator the schemas know must have a probe here (a test checks it). The readers'
and the external source's probes are in ``reader_probes.py`` and ``source_probes.py``; all
three register into ``probe_set.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from conveyor.schema import DTYPES, schema_of
from conveyor_server.engine.behaviour.inputs import image, images, probe_files
from conveyor_server.engine.behaviour.probe_set import Case, Targs, op_probe, source_probe
from conveyor_server.engine.ops.registry import SAMPLE_INDEX
from conveyor_server.engine.stages.file_reader import FileReaderStage
from conveyor_server.engine.stages.random_ops import RandomStage


def _f32(value: float) -> np.ndarray:
    return np.asarray(value, dtype=np.float32)


def _i32(value: int) -> np.ndarray:
    return np.asarray(value, dtype=np.int32)


# -- operators ---------------------------------------------------------------------------


@op_probe("decoders.image")
def _decode(variant: str) -> list[Case]:
    files = [(np.frombuffer(data, dtype=np.uint8).copy(),) for _, data in probe_files()]
    return [Case({"output_type": kind}, [(f, {}) for f in files], input_layouts=("",))
            for kind in ("RGB", "BGR", "GRAY")]


@op_probe("rotate", variant_arg="interp_type")
def _rotate(interp: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    angles = (17.3, -92.0, 45.0, 180.0, 0.5)
    samples = [((p,), {"angle": _f32(angles[i % len(angles)])})
               for i, p in enumerate(pictures)]
    return [
        Case({"interp_type": interp}, samples),
        Case({"interp_type": interp, "keep_size": True}, samples[:3]),
        Case({"interp_type": interp, "fill_value": [10.0, 200.0, 31.0], "size": [20.0, 30.0]},
             [s for s in samples if s[0][0].shape[2] == 3]),
    ]


@op_probe("resize", variant_arg="interp_type")
def _resize(interp: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    samples: list[tuple[Sequence[np.ndarray], Targs]] = [((p,), {}) for p in pictures]
    return [
        Case({"interp_type": interp, "size": [64.0, 80.0]}, samples),   # up
        Case({"interp_type": interp, "size": [12.0, 15.0]}, samples),   # down, antialiased
        Case({"interp_type": interp, "size": [12.0, 15.0], "antialias": False}, samples),
        Case({"interp_type": interp, "size": [40.0, 9.0]}, samples),    # up and down
        Case({"interp_type": interp, "resize_shorter": 11.0, "dtype": "float32"},
             samples[:6]),
    ]


@op_probe("crop")
def _crop(variant: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    pos = [{"crop_pos_x": _f32(x), "crop_pos_y": _f32(y)}
           for x, y in ((0.0, 0.0), (0.5, 0.5), (1.0, 0.3), (0.77, 1.0))]
    samples = [((p,), pos[i % len(pos)]) for i, p in enumerate(pictures)]
    return [
        Case({"crop": [5.0, 4.0]}, samples),
        Case({"crop": [40.0, 9.0], "out_of_bounds_policy": "pad", "fill_values": [3.0]},
             samples),
        Case({"crop": [40.0, 50.0], "out_of_bounds_policy": "trim_to_shape"}, samples),
    ]


@op_probe("flip")
def _flip(variant: str) -> list[Case]:
    pictures = images(("uint8", "float32", "int16"))
    flags = ((1, 0), (0, 1), (1, 1), (0, 0))
    samples = [((p,), {"horizontal": _i32(flags[i % 4][0]), "vertical": _i32(flags[i % 4][1])})
               for i, p in enumerate(pictures)]
    return [Case({}, samples)]


@op_probe("crop_mirror_normalize")
def _crop_mirror_normalize(variant: str) -> list[Case]:
    same_size = [image(29, 37, 3, salt=s) for s in range(3)]
    mixed = [image(h, w, 3, salt=s) for s, (h, w) in enumerate(((29, 37), (16, 21)))]
    mirror = [{"mirror": _i32(i % 2)} for i in range(3)]
    norm = {"mean": [120.5, 115.25, 100.0], "std": [60.1, 58.7, 57.3]}
    cases = []
    for group in (same_size, mixed):
        samples = [((p,), mirror[i]) for i, p in enumerate(group)]
        cases += [
            Case({**norm, "crop": [13.0, 11.0]}, samples),
            Case({**norm, "dtype": "float16", "output_layout": "HWC", "pad_output": True},
                 samples),
            Case({"mean": [3.0], "std": [0.7], "dtype": "uint8", "scale": 0.5, "shift": 64.0},
                 samples),
            Case({"mean": [128.0], "std": [1.0], "dtype": "int8", "crop": [15.0, 20.0]},
                 samples),
        ]
    return cases


@op_probe("cast")
def _cast(variant: str) -> list[Case]:
    edge: np.ndarray = np.array([[[-1e9, -129.5, -128.5, -0.5, 0.5, 1.5, 2.5, 254.5, 255.5, 65535.5,
                       3.4e38, np.nan, np.inf, -np.inf]]], dtype=np.float32).reshape(1, 14, 1)
    sources = [edge, image(7, 5, 3, "float32"), image(7, 5, 3, "uint8"), image(7, 5, 1, "int16")]
    return [Case({"dtype": dtype}, [((s,), {}) for s in sources]) for dtype in DTYPES]


def _indexed(samples: Sequence[tuple[Sequence[np.ndarray], Targs]],
             first: int = 0) -> list[tuple[Sequence[np.ndarray], Targs]]:
    """Samples with their global index, for operators whose draws are keyed by it."""
    return [(inputs, {**targs, SAMPLE_INDEX: np.array(first + i, dtype=np.uint64)})
            for i, (inputs, targs) in enumerate(samples)]


@op_probe("random_resized_crop", variant_arg="interp_type")
def _random_resized_crop(interp: str) -> list[Case]:
    samples = _indexed([((p,), {}) for p in images(("uint8", "float32"))], first=2**40)
    return [
        Case({"interp_type": interp, "size": [24.0, 20.0]}, samples),
        Case({"interp_type": interp, "size": [9.0], "antialias": False,
              "random_area": [0.5, 0.9], "random_aspect_ratio": [0.5, 2.0]}, samples),
        # Windows that never fit: the centred fallback.
        Case({"interp_type": interp, "size": [16.0, 16.0], "random_area": [1.0],
              "random_aspect_ratio": [3.0, 4.0], "num_attempts": 2}, samples),
    ]


@op_probe("decoders.image_random_crop")
def _image_random_crop(variant: str) -> list[Case]:
    files = _indexed([((np.frombuffer(data, dtype=np.uint8).copy(),), {})
                      for _, data in probe_files()], first=7)
    return [Case({"output_type": kind, "random_area": [0.1, 0.6]}, files, input_layouts=("",))
            for kind in ("RGB", "GRAY")]


@op_probe("decoders.image_crop")
def _image_crop(variant: str) -> list[Case]:
    pos = {"crop_pos_x": _f32(0.25), "crop_pos_y": _f32(0.8)}
    files = [((np.frombuffer(data, dtype=np.uint8).copy(),), pos) for _, data in probe_files()]
    return [Case({"output_type": "BGR", "crop": [3.0, 4.0]}, files, input_layouts=("",))]


@op_probe("decoders.image_slice")
def _image_slice(variant: str) -> list[Case]:
    files = [np.frombuffer(data, dtype=np.uint8).copy() for _, data in probe_files()]

    def fed(anchor: list[float], shape: list[float]) -> list[tuple[Sequence[np.ndarray], Targs]]:
        return [((f, np.array(anchor, dtype=np.float32), np.array(shape, dtype=np.float32)), {})
                for f in files]

    layouts = ("", "", "")
    return [
        Case({"output_type": "RGB"}, fed([0.25, 0.1], [0.5, 0.6]), layouts),
        Case({"output_type": "GRAY", "normalized_anchor": False, "normalized_shape": False,
              "axis_names": "HW"}, fed([1.0, 2.5], [3.0, 2.0]), layouts),
        Case({"output_type": "BGR", "out_of_bounds_policy": "pad", "fill_values": [7.0]},
             fed([-0.25, 0.5], [1.0, 0.75]), layouts),
        Case({"out_of_bounds_policy": "trim_to_shape", "axes": [0]}, fed([0.5], [0.9]), layouts),
    ]


def _color_samples(extra: Targs) -> list[tuple[Sequence[np.ndarray], Targs]]:
    pictures = [p for p in images(("uint8", "float32")) if p.shape[2] == 3]
    pictures.append(image(6, 7, 3, "int16"))
    return [((p,), extra) for p in pictures]


@op_probe("brightness_contrast")
def _brightness_contrast(variant: str) -> list[Case]:
    fed = {"brightness": _f32(1.3), "contrast": _f32(0.6)}
    return [
        Case({}, _color_samples(fed)),
        Case({"brightness_shift": 0.1, "contrast_center": 100.0, "dtype": "float32"},
             _color_samples(fed)),
        Case({"brightness": 2.5, "contrast": 1.7, "dtype": "uint8"}, _color_samples({})),
    ]


@op_probe("hsv")
def _hsv(variant: str) -> list[Case]:
    fed = {"hue": _f32(-47.5), "saturation": _f32(1.4)}
    return [Case({"value": 0.9}, _color_samples(fed)),
            Case({"hue": 200.0, "dtype": "float32"}, _color_samples({}))]


@op_probe("color_twist")
def _color_twist(variant: str) -> list[Case]:
    fed = {"hue": _f32(33.0), "contrast": _f32(1.3)}
    return [Case({"saturation": 0.5, "brightness": 1.1}, _color_samples(fed)),
            Case({"value": 1.2, "dtype": "float16"}, _color_samples({}))]


# -- sources -----------------------------------------------------------------------------


def _draws(op_type: str, args: Mapping[str, Any]) -> list[np.ndarray]:
    defaults = {name: a.default for name, a in schema_of(op_type).args.items()}
    out = []
    for dtype in schema_of(op_type).args["dtype"].choices:
        stage = RandomStage(op_type, 3, {**defaults, **args, "dtype": dtype},
                            batch_size=4, seed=0x5EED)
        out += [stage.draw(0, 4096), stage.draw(2**40 + 17, 64)]
    return out


@source_probe("random.uniform")
def _uniform() -> list[np.ndarray]:
    return (_draws("random.uniform", {"range": (-30.0, 30.0), "shape": (2,)})
            + _draws("random.uniform", {"values": (0.5, 1.0, 2.5)}))


@source_probe("random.normal")
def _normal() -> list[np.ndarray]:
    return _draws("random.normal", {"mean": 0.5, "stddev": 2.0, "shape": (3,)})


@source_probe("random.coin_flip")
def _coin_flip() -> list[np.ndarray]:
    return _draws("random.coin_flip", {"probability": 0.3})


@source_probe("readers.file")
def _file_order() -> list[np.ndarray]:
    out: list[np.ndarray] = []
    options: dict[str, Any]
    for n, options in ((1, {}), (7, {"random_shuffle": True}),
                       (1000, {"random_shuffle": True, "num_shards": 3, "shard_id": 1}),
                       (1000, {"shuffle_after_epoch": True, "num_shards": 2}),
                       (13, {"pad_last_batch": True, "num_shards": 2, "stick_to_shard": True})):
        stage = FileReaderStage(5, n, batch_size=4, seed=0x5EED, **options)
        out += [stage.order(epoch) for epoch in range(3)]
    return out


