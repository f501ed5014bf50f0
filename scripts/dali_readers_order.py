"""Record what DALI's ``fn.readers.tfrecord`` and ``fn.readers.coco`` read, for the
comparison test (``tests/engine/test_readers_dali_order.py``).

Run with an interpreter that has DALI (numpy and DALI alone are needed):

    /path/to/dali-venv/bin/python scripts/dali_readers_order.py > \\
        tests/engine/fixtures/dali_readers/expected.json

It writes the data sets of ``tests/support/record_data.py`` (two TFRecord files of 11 and
8 records with their index files; 13 COCO images) into a temporary folder, runs DALI's
readers over them in every case of ``CASES`` (sharding, padding, shard rotation,
shuffling, and COCO's ``ltrb``, ``ratio``, ``skip_empty``, ``size_threshold``,
``include_iscrowd``, ``avoid_class_remapping``, ``polygon_masks``, ``image_ids``) and prints,
per case, every sample of every batch as JSON. How each case is compared is its ``check``:
``exact`` (the same samples in the same order), ``distinct`` (the same set of samples over
the run: DALI's shuffle buffer draws a different order than Conveyor's permutation) and
``epochs`` (the first epoch exact, every later one the same samples in any order) and
``epoch_sets`` (every epoch the same samples in any order: DALI's COCO reader shuffles its
first epoch too under ``shuffle_after_epoch``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import record_data  # noqa: E402

TFRECORD_COUNTS = (11, 8)
COCO_IMAGES = 13

#: The features every TFRecord case reads (DALI's spelling): (kind, shape, dtype, default).
FEATURES: dict[str, tuple[str, list[int], str, Any]] = {
    "image/encoded": ("fixed", [], "string", ""),
    "image/class/label": ("fixed", [], "int64", -1),
    "pair": ("fixed", [2], "int64", 0),
    "label1": ("fixed", [1], "int64", 0),
    "boxes": ("var", [], "float32", 0.0),
    "boxes2": ("var", [2], "float32", 0.0),
}
#: Where each feature's values come from in the records (two read the same one).
SOURCE = {"label1": "image/class/label", "boxes2": "boxes"}

#: (name, reader, batch size, arguments, check).
CASES: list[tuple[str, str, int, dict[str, Any], str]] = [
    ("tfrecord_plain", "tfrecord", 4, {}, "exact"),
    ("tfrecord_shards3_id1", "tfrecord", 4, {"num_shards": 3, "shard_id": 1}, "exact"),
    ("tfrecord_shards4_id3", "tfrecord", 3, {"num_shards": 4, "shard_id": 3}, "exact"),
    ("tfrecord_shards3_id2_stick_pad", "tfrecord", 4,
     {"num_shards": 3, "shard_id": 2, "stick_to_shard": True, "pad_last_batch": True}, "exact"),
    ("tfrecord_shards2_id0_pad", "tfrecord", 4,
     {"num_shards": 2, "shard_id": 0, "pad_last_batch": True}, "exact"),
    ("tfrecord_shards3_id0_stick_shuffle", "tfrecord", 2,
     {"num_shards": 3, "shard_id": 0, "stick_to_shard": True, "random_shuffle": True,
      "initial_fill": 8}, "distinct"),
    ("tfrecord_shuffle_after_epoch", "tfrecord", 4, {"shuffle_after_epoch": True}, "epochs"),
    ("coco_plain", "coco", 3, {}, "exact"),
    ("coco_polygons_ids", "coco", 3, {"polygon_masks": True, "image_ids": True}, "exact"),
    ("coco_ltrb_ratio", "coco", 3,
     {"ltrb": True, "ratio": True, "polygon_masks": True, "image_ids": True}, "exact"),
    ("coco_skip_empty", "coco", 4, {"skip_empty": True, "image_ids": True}, "exact"),
    ("coco_size_threshold_no_crowd", "coco", 3,
     {"size_threshold": 5.0, "include_iscrowd": False, "image_ids": True}, "exact"),
    ("coco_no_remapping", "coco", 3, {"avoid_class_remapping": True, "ltrb": True}, "exact"),
    ("coco_shards3_id2_pad", "coco", 2,
     {"num_shards": 3, "shard_id": 2, "pad_last_batch": True, "image_ids": True}, "exact"),
    ("coco_shards2_id1", "coco", 4, {"num_shards": 2, "shard_id": 1, "image_ids": True},
     "exact"),
    # One shard: with random_shuffle DALI's COCO reader (as its file reader) shuffles the
    # image list once, with a fixed seed, before sharding it, so its shards hold other
    # images than Conveyor's (which shards the list in id order).
    ("coco_shuffle", "coco", 2, {"random_shuffle": True, "initial_fill": 8, "image_ids": True},
     "distinct"),
    ("coco_shuffle_after_epoch", "coco", 3,
     {"shuffle_after_epoch": True, "image_ids": True}, "epoch_sets"),
]


def epoch_samples(reader: str, args: dict[str, Any]) -> int:
    """The samples one epoch of the case's shard yields, padding included (the most over
    shards when padding, as both readers pad to the largest shard)."""
    n = sum(TFRECORD_COUNTS) if reader == "tfrecord" else COCO_IMAGES
    if reader == "coco" and args.get("skip_empty"):
        n = sum(1 for image in record_data.coco_document(COCO_IMAGES)["images"]
                if image["id"] % 4 and image["id"] % 5)
    shards = args.get("num_shards", 1)
    return -(-n // shards)


def batches_of(reader: str, batch: int, args: dict[str, Any]) -> int:
    """Enough batches for three passes over the shard, and one more."""
    return -(-3 * epoch_samples(reader, args) // batch) + 1


def _run(pipe: Any, batches: int) -> list[list[list[Any]]]:
    import numpy as np

    samples: list[list[list[Any]]] = []
    for _ in range(batches):
        outs = pipe.run()
        for s in range(len(outs[0])):
            sample = []
            for out in outs:
                value = np.array(out[s])
                sample.append(list(value.tobytes()) if value.dtype == np.uint8
                              else value.tolist())
            samples.append(sample)
    return samples


def main() -> None:
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def

    dtypes = {"int64": tfrec.int64, "float32": tfrec.float32, "string": tfrec.string}
    out: dict[str, Any] = {"features": FEATURES, "source": SOURCE,
                           "tfrecord_counts": TFRECORD_COUNTS, "coco_images": COCO_IMAGES,
                           "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths, indexes = record_data.write_tfrecords(Path(tmp, "tf"), TFRECORD_COUNTS)
        file_root, annotations = record_data.write_coco(Path(tmp, "coco"), COCO_IMAGES)
        for name, reader, batch, args, check in CASES:
            if reader == "tfrecord":
                # One reader per feature: DALI keys its outputs by the record's feature
                # name, and two features here read the same one.
                @pipeline_def(batch_size=batch, num_threads=1, device_id=None, seed=5)
                def tf_pipe(feature: str, options: dict[str, Any]) -> Any:
                    kind, shape, dtype, default = FEATURES[feature]
                    source = SOURCE.get(feature, feature)
                    spec = (tfrec.FixedLenFeature(shape, dtypes[dtype], default)
                            if kind == "fixed" else
                            tfrec.VarLenFeature(shape, dtypes[dtype], default) if shape else
                            tfrec.VarLenFeature(dtypes[dtype], default))
                    outputs = fn.readers.tfrecord(path=paths, index_path=indexes,
                                                  features={source: spec}, **options)
                    return outputs[source]

                columns = []
                for feature in FEATURES:
                    pipe = tf_pipe(feature=feature, options=args)
                    pipe.build()
                    columns.append(_run(pipe, batches_of(reader, batch, args)))
                samples = [[column[i][0] for column in columns]
                           for i in range(len(columns[0]))]
            else:
                @pipeline_def(batch_size=batch, num_threads=1, device_id=None, seed=5)
                def coco_pipe(options: dict[str, Any]) -> Any:
                    return tuple(fn.readers.coco(file_root=file_root,
                                                 annotations_file=annotations, **options))

                pipe = coco_pipe(options=args)
                pipe.build()
                samples = _run(pipe, batches_of(reader, batch, args))
            out["cases"].append({"name": name, "reader": reader, "batch_size": batch,
                                 "args": args, "check": check,
                                 "epoch": epoch_samples(reader, args), "samples": samples})
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
