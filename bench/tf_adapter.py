"""The TensorFlow adapter's cost: one trainer's stream of 224x224 images taken with
``RemotePipeline.run`` (numpy arrays) and through ``conveyor.tf.ConveyorDataset`` (tf
tensors, with and without a ``prefetch``), as uint8 and float16.

The pipelines are ``bench.wire``'s (224x224x3 uint8 ``.npy`` files, batches of 64; float16
through ``crop_mirror_normalize``), on one server on loopback. Images per second of the
trainer taking batches as fast as it can, runs interleaved.

Run: python -m bench.tf_adapter [--quick] [--runs N]
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
from bench._shared import Server, interleaved, machine, median, parse_args, spread, table
from bench.wire import BATCH, FORMATS, make_arrays, spec_for


def images_per_second(step: Callable[[], object], batches: int) -> float:
    step()
    step()
    start = time.perf_counter()
    for _ in range(batches):
        step()
    return batches * BATCH / (time.perf_counter() - start)


def main() -> None:
    args = parse_args(__doc__ or "")
    runs = args.runs or (2 if args.quick else 5)
    batches = 20 if args.quick else 60
    print(machine())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from conveyor.tf import ConveyorDataset

    formats = {name: FORMATS[name] for name in ("uint8", "float16")}
    with tempfile.TemporaryDirectory() as tmp:
        root = make_arrays(Path(tmp) / "arrays")
        specs = {name: spec_for(root, dtype) for name, dtype in formats.items()}
        with Server(Path(tmp)) as server, conveyor.Client(server.address, timeout=60) as c:
            options = {"timeout": 60}
            remote = {name: c.create(f"client-{name}", spec) for name, spec in specs.items()}
            datasets = {name: ConveyorDataset(server.address, f"tf-{name}", spec,
                                              client_options=options)
                        for name, spec in specs.items()}
            prefetched = {name: ConveyorDataset(server.address, f"tf-prefetch-{name}", spec,
                                                client_options=options)
                          for name, spec in specs.items()}
            def rate(step: Callable[[], object]) -> Callable[[], float]:
                return lambda: images_per_second(step, batches)

            contenders: dict[str, Callable[[], float]] = {}
            for name in formats:
                plain: Any = iter(datasets[name])
                ahead: Any = iter(prefetched[name].prefetch(2))
                contenders[f"client run(), {name}"] = rate(remote[name].run)
                contenders[f"tf dataset, {name}"] = rate(plain.__next__)
                contenders[f"tf dataset + prefetch(2), {name}"] = rate(ahead.__next__)
            results = interleaved(contenders, runs)
            for stream in remote.values():
                stream.close()
            for dataset in (*datasets.values(), *prefetched.values()):
                dataset.close()
    rows = [(name, f"{median(values):,.0f}", spread(values, "{:,.0f}"))
            for name, values in results.items()]
    table(rows, ("224x224 images, batches of 64, one stream", "images/s", "spread"))
    for name in formats:
        ratio = median(results[f"tf dataset, {name}"]) / median(results[f"client run(), {name}"])
        print(f"{name}: the tf dataset streams {ratio:.2f} x the client's images/s")


if __name__ == "__main__":
    main()
