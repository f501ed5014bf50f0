"""``fn.readers.tfrecord`` and ``fn.readers.coco`` read what DALI's read, sample for sample.

``fixtures/dali_readers/expected.json`` holds every sample DALI 2.4 read over the data
sets of ``tests/support/record_data.py`` in each case of ``scripts/dali_readers_order.py``
(the script that recorded it: sharding, padding, shard rotation, shuffling, COCO's box,
label and polygon options). The same files are written here and read by Conveyor's readers
with the same arguments; each case is compared as its ``check`` says (see the script).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.definition import tfrecord as tfrec
from conveyor_server import Pipeline
from tests.support import record_data

EXPECTED = json.loads((Path(__file__).parent / "fixtures" / "dali_readers" /
                       "expected.json").read_text())
CASES = {case["name"]: case for case in EXPECTED["cases"]}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("dali_readers")
    paths, indexes = record_data.write_tfrecords(root / "tf", EXPECTED["tfrecord_counts"])
    file_root, annotations = record_data.write_coco(root / "coco", EXPECTED["coco_images"])
    return {"paths": paths, "index_path": indexes, "file_root": file_root,
            "annotations_file": annotations}


def _feature(kind: str, shape: list[int], dtype: str, default: Any) -> tfrec.Feature:
    if kind == "fixed":
        return tfrec.FixedLenFeature(shape, dtype, default)
    return tfrec.VarLenFeature(shape, dtype, default) if shape else \
        tfrec.VarLenFeature(dtype, default)


def _samples(spec: Any, batches: int) -> list[list[Any]]:
    out: list[list[Any]] = []
    with Pipeline(spec) as pipe:
        for _ in range(batches):
            outputs = pipe.run()
            for s in range(len(outputs[0])):
                sample = []
                for output in outputs:
                    value = np.asarray(output[s])
                    sample.append(list(value.tobytes()) if value.dtype == np.uint8
                                  else value.tolist())
                out.append(sample)
    return out


def conveyor_samples(case: dict[str, Any], data: dict[str, Any]) -> list[list[Any]]:
    batch, args = case["batch_size"], case["args"]
    batches = len(case["samples"]) // batch
    if case["reader"] == "coco":
        @pipeline_def(batch_size=batch, num_threads=2, seed=5)
        def coco() -> Any:
            return fn.readers.coco(file_root=data["file_root"],
                                   annotations_file=data["annotations_file"],
                                   prefetch_queue_depth=2, read_ahead=True, **args)
        return _samples(coco(), batches)
    columns = []
    for name, (kind, shape, dtype, default) in EXPECTED["features"].items():
        source = EXPECTED["source"].get(name, name)

        @pipeline_def(batch_size=batch, num_threads=2, seed=5)
        def tfrecord(source: str, feature: tfrec.Feature) -> Any:
            return fn.readers.tfrecord(path=data["paths"], index_path=data["index_path"],
                                       features={source: feature}, **args)[source]
        columns.append(_samples(tfrecord(source=source,
                                         feature=_feature(kind, shape, dtype, default)),
                                batches))
    return [[column[i][0] for column in columns] for i in range(len(columns[0]))]


def _key(sample: list[Any]) -> str:
    return json.dumps(sample)


@pytest.mark.parametrize("name", sorted(CASES))
def test_reads_what_dali_reads(data: dict[str, Any], name: str) -> None:
    case = CASES[name]
    expected, epoch = case["samples"], case["epoch"]
    got = conveyor_samples(case, data)
    assert len(got) == len(expected)
    if case["check"] == "exact":
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert a == b, f"{name}: sample {i} differs from DALI's"
    elif case["check"] == "distinct":
        assert {_key(s) for s in got} == {_key(s) for s in expected}
    else:
        whole = len(got) // epoch
        assert whole >= 2
        for e in range(whole):
            ours, dalis = got[e * epoch:(e + 1) * epoch], expected[e * epoch:(e + 1) * epoch]
            if e == 0 and case["check"] == "epochs":
                assert ours == dalis, f"{name}: the first epoch differs from DALI's"
            assert Counter(map(_key, ours)) == Counter(map(_key, dalis)), \
                f"{name}: epoch {e} holds other samples than DALI's"


def test_the_comparison_covers_both_readers_and_every_check() -> None:
    assert {case["reader"] for case in CASES.values()} == {"tfrecord", "coco"}
    assert {case["check"] for case in CASES.values()} == {"exact", "distinct", "epochs",
                                                          "epoch_sets"}
    # The recording holds samples with boxes, polygons and more than one box.
    polygons = [s for s in CASES["coco_polygons_ids"]["samples"] if s[3]]
    assert polygons and any(len(s[1]) > 1 for s in polygons)
