"""crop_mirror_normalize per batch against per sample (the engine's batched-operator seam).

Two measurements, each with the per-sample and the per-batch form of the same operator
(same arguments, same bytes: ``tests/engine/test_batch_ops.py`` checks it):

- the operator alone, on one thread: a batch of decoded 256x256 images, cropped to
  224x224 at a per-sample position, mirrored by a per-sample coin, normalized to float32
  CHW, and handed over as one array (``as_array()``, what a trainer feeds its model). Per
  sample: the operator once per image, then the samples stacked (the copy ``as_array()``
  makes of separate samples). Per batch: one call writing every sample into one
  preallocated array, which ``as_array()`` returns as it is.
- the whole pipeline in process (read, decode, resize to 256x256, the operator), 2 worker
  threads, ``as_array()`` on every batch: ``Pipeline(batch_ops=False)`` against
  ``Pipeline(batch_ops=True)``, with the default prefetch depth of 2 and with 1. The
  batched form runs at a barrier on one worker while the other works on the next batch's
  samples; without a batch computed ahead, the other worker has less to do.

Run: python -m bench.batch_ops [--quick] [--runs N] [--data DIR]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from bench._shared import (
    image_files,
    interleaved,
    machine,
    make_dataset,
    median,
    parse_args,
    ratio,
    spread,
    table,
    timed,
)
from conveyor import fn, pipeline_def, types
from conveyor.definition.schemas import registry as schema
from conveyor.tensor_list import TensorList
from conveyor.transport.allocator import DEFAULT, tune_malloc
from conveyor.v1 import pipeline_pb2
from conveyor_server import Pipeline
from conveyor_server.engine.ops.registry import BATCH, SAMPLE, BatchOp, OpContext, build

THREADS = 2
MEAN, STD = [124.0, 117.0, 104.0], [58.0, 57.0, 57.0]
CMN_ARGS: dict[str, Any] = {"crop": (224, 224), "mean": MEAN, "std": STD,
                            "output_layout": "CHW"}


def pipeline_spec(root: str, batch: int) -> Any:
    @pipeline_def(batch_size=batch, num_threads=THREADS, seed=12, enable_checkpointing=True)
    def train() -> Any:
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
        images = fn.decoders.image(jpegs, output_type=types.RGB)
        images = fn.resize(images, size=(256, 256))
        images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(),
                                          crop_pos_x=fn.random.uniform(range=(0.0, 1.0)),
                                          **CMN_ARGS)
        return images, labels

    return train()


def in_process(root: str, batch: int, batches: int, batch_ops: bool,
               depth: int) -> Callable[[], float]:
    spec = pipeline_spec(root, batch)
    spec.prefetch_queue_depth = depth

    def run() -> float:
        with Pipeline(spec, batch_ops=batch_ops) as pipe:
            def step() -> np.ndarray:  # what a trainer takes: the batch as one array
                return pipe.run()[0].as_array()
            return timed(step, batches, batch)
    return run


def op_context() -> OpContext:
    spec = pipeline_pb2.OpSpec(type="crop_mirror_normalize", num_outputs=1)
    for name, value in CMN_ARGS.items():
        spec.args[name].CopyFrom(schema.encode_arg("crop_mirror_normalize", name, value))
    for name in ("mirror", "crop_pos_x"):
        spec.arg_inputs[name].CopyFrom(pipeline_pb2.OutputRef(op=0, output=0))
    return OpContext(op_type="crop_mirror_normalize", index=1, args=schema.decode_args(spec),
                     tensor_args=frozenset({"mirror", "crop_pos_x"}), device="cpu",
                     input_layouts=("HWC",))


def op_alone(images: list[np.ndarray], batches: int, per_batch: bool) -> Callable[[], float]:
    ctx = op_context()
    rng = np.random.default_rng(0)
    n = len(images)
    mirror = [np.array([int(m)], dtype=np.int32) for m in rng.integers(0, 2, n)]
    pos = [np.array([p], dtype=np.float32) for p in rng.uniform(0, 1, n)]
    targs: dict[str, list[np.ndarray]] = {"mirror": mirror, "crop_pos_x": pos}

    def run() -> float:
        op = build(ctx, BATCH if per_batch else SAMPLE)

        def step() -> np.ndarray:
            if isinstance(op, BatchOp):
                return TensorList(op.fn([images], targs)[0]).as_array()
            outs = [op.fn([image], {k: v[i] for k, v in targs.items()})[0]
                    for i, image in enumerate(images)]
            return TensorList(outs).as_array()
        return timed(step, batches, n, warmup=1)
    return run


def decoded(files: list[str], count: int) -> list[np.ndarray]:
    out = []
    for path in files[:count]:
        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        out.append(cv2.resize(image, (256, 256), interpolation=cv2.INTER_AREA))
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    tune_malloc(DEFAULT)
    data = make_dataset(args.data, args.images)
    files = image_files(data)
    images_per_run = 128 if args.quick else 768
    print(f"# crop_mirror_normalize per batch vs per sample ({machine()})\n# images/s, median "
          f"of {args.runs} interleaved runs (min-max), {images_per_run} images timed per run\n")
    rows = []
    for batch in (8, 64):
        batches = max(2, images_per_run // batch)
        contenders = {
            "operator alone, per sample + stack": op_alone(decoded(files, batch), batches,
                                                           per_batch=False),
            "operator alone, per batch": op_alone(decoded(files, batch), batches,
                                                  per_batch=True),
            **{f"pipeline, prefetch {depth}, batch_ops={form}":
               in_process(str(data), batch, batches, form, depth)
               for depth in (2, 1) for form in (False, True)},
        }
        r = interleaved(contenders, args.runs)
        print(f"batch {batch}:")
        table([(name, f"{median(v):.0f}", spread(v)) for name, v in r.items()],
              ("contender", "images/s", "spread"))
        rows.append((f"operator alone: per batch / per sample, batch {batch}",
                     ratio(r["operator alone, per batch"],
                           r["operator alone, per sample + stack"])))
        for depth in (2, 1):
            rows.append((f"pipeline, prefetch {depth}: batch_ops / per sample, batch {batch}",
                         ratio(r[f"pipeline, prefetch {depth}, batch_ops=True"],
                               r[f"pipeline, prefetch {depth}, batch_ops=False"])))
    table(rows, ("ratio (per-run, median and spread)", "value"))


if __name__ == "__main__":
    main()
