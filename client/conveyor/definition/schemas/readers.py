"""The schemas of ``readers.numpy``, ``readers.webdataset``, ``readers.caffe``,
``readers.caffe2``, ``readers.tfrecord`` and ``readers.coco``: DALI's argument names.

All share the file reader's order and sharding arguments (``READER_ORDER``; the engine
orders every reader with one stage; the LMDB readers, as DALI's, have no
``shuffle_after_epoch``). Arguments DALI uses to tune its own I/O
(``initial_fill``, ``read_ahead``, ``dont_use_mmap``, ``cache_header_information``,
``use_o_direct``, a reader's own ``prefetch_queue_depth``) are accepted so that DALI
pipelines port unchanged; they change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor.definition.schemas.args import ON_ERROR_ARGS, SEED_ARGS, Arg, OpSchema
from conveyor.definition.tfrecord import feature_names

#: What ``readers.webdataset`` outputs may hold (DALI's set: fixed-size numbers, no bool).
WEBDATASET_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                     "float16", "float32", "float64")

#: Every reader's order and sharding (``engine/stages/file_reader.py``), and ``verify``: how
#: a checkpoint recognises the data set (modification times, or contents read once).
READER_ORDER = {
    "random_shuffle": Arg("bool", default=False),
    "shuffle_after_epoch": Arg("bool", default=False),
    "shuffle_after_epoch_seed": Arg("int", default=524287, minimum=0),
    "shard_id": Arg("int", default=0, minimum=0),
    "num_shards": Arg("int", default=1, minimum=1),
    "stick_to_shard": Arg("bool", default=False),
    "pad_last_batch": Arg("bool", default=False),
    "initial_fill": Arg("int", default=1024, minimum=1),
    "read_ahead": Arg("bool", default=False),
    "dont_use_mmap": Arg("bool", default=False),
    "verify": Arg("enum", default="metadata", choices=("metadata", "content")),
}

#: The LMDB readers' order and sharding: DALI's loader arguments, without the file reader's
#: ``shuffle_after_epoch``; ``lazy_init`` and ``tensor_init_bytes`` tune DALI's own start and
#: buffers, and change nothing here.
LMDB_ORDER = {
    **{k: v for k, v in READER_ORDER.items() if not k.startswith("shuffle_after_epoch")},
    "lazy_init": Arg("bool", default=False),
    "tensor_init_bytes": Arg("int", default=1048576, minimum=0),
}

#: ``readers.caffe2``'s ``label_type``, as DALI numbers them.
SINGLE_LABEL, MULTI_LABEL_SPARSE, MULTI_LABEL_DENSE, MULTI_LABEL_WEIGHTED_SPARSE, NO_LABEL = \
    range(5)
#: The most classes a multi-label output may have (its length).
MAX_NUM_LABELS = 1 << 24
#: The most additional tensors a Caffe2 record may feed (one output each).
MAX_ADDITIONAL_INPUTS = 64


def caffe_outputs(args: Mapping[str, Any]) -> tuple[str, ...]:
    """``readers.caffe``: the image if ``image_available``, the label if
    ``label_available``."""
    return (("images",) if args["image_available"] else ()) + \
        (("labels",) if args["label_available"] else ())


def caffe2_outputs(args: Mapping[str, Any]) -> tuple[str, ...]:
    """``readers.caffe2``: the image if ``image_available``, the label unless ``label_type``
    is NO_LABEL (one output, also for sparse labels), one output per additional input, the
    bounding box if ``bbox``."""
    extra = args["additional_inputs"]
    # Counted before the arguments are validated (a spec from the wire): out of bounds
    # counts none, and the validation refuses it.
    extra = extra if isinstance(extra, int) and 0 <= extra <= MAX_ADDITIONAL_INPUTS else 0
    return ((("images",) if args["image_available"] else ())
            + (("labels",) if args["label_type"] != NO_LABEL else ())
            + tuple(f"additional_{i}" for i in range(extra))
            + (("bboxes",) if args["bbox"] else ()))


def tfrecord_outputs(args: Mapping[str, Any]) -> tuple[str, ...]:
    """``readers.tfrecord``: one output per feature, named by it, in ``features``' order."""
    return feature_names(args["features"])


def coco_outputs(args: Mapping[str, Any]) -> tuple[str, ...]:
    """``readers.coco``: the image's bytes, its boxes and their labels, then the polygons and
    their vertices if ``polygon_masks`` or the mask if ``pixelwise_masks``, then the image's
    id if ``image_ids``."""
    return (("images", "bboxes", "labels")
            + (("polygons", "vertices") if args["polygon_masks"] else ())
            + (("pixelwise_masks",) if args["pixelwise_masks"] else ())
            + (("image_ids",) if args["image_ids"] else ()))


READER_SCHEMAS = {
    "readers.numpy": OpSchema(
        0,
        ("data",),
        {
            "file_root": Arg("str", default="", path=True),
            "file_filter": Arg("str", default="*.npy"),
            "file_list": Arg("str", default="", path=True),
            "files": Arg("strings", path=True, unbounded=True),
            **READER_ORDER,
            "cache_header_information": Arg("bool", default=False),
            "use_o_direct": Arg("bool", default=False),
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
    ),
    "readers.webdataset": OpSchema(
        0,
        ("data",),
        {
            "paths": Arg("strings", required=True, path=True, unbounded=True),
            "index_paths": Arg("strings", path=True, unbounded=True),
            # One entry per output: that output's extensions, ';'-separated alternatives.
            "ext": Arg("strings", required=True),
            "missing_component_behavior": Arg("enum", default="",
                                              choices=("", "empty", "skip", "error")),
            "dtypes": Arg("strings", choices=WEBDATASET_DTYPES),
            "case_sensitive_extensions": Arg("bool", default=True),
            **READER_ORDER,
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
        outputs_from="ext",
    ),
    "readers.caffe": OpSchema(
        0,
        ("images", "labels"),
        {
            "path": Arg("strings", required=True, path=True, unbounded=True),
            "image_available": Arg("bool", default=True),
            "label_available": Arg("bool", default=True),
            **LMDB_ORDER,
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
        outputs_by=caffe_outputs,
    ),
    "readers.caffe2": OpSchema(
        0,
        ("images", "labels"),
        {
            "path": Arg("strings", required=True, path=True, unbounded=True),
            "image_available": Arg("bool", default=True),
            "label_type": Arg("int", default=SINGLE_LABEL, minimum=SINGLE_LABEL,
                              maximum=NO_LABEL),
            "num_labels": Arg("int", default=1, minimum=1, maximum=MAX_NUM_LABELS),
            "additional_inputs": Arg("int", default=0, minimum=0,
                                     maximum=MAX_ADDITIONAL_INPUTS),
            "bbox": Arg("bool", default=False),
            **LMDB_ORDER,
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
        outputs_by=caffe2_outputs,
    ),
    "readers.tfrecord": OpSchema(
        0,
        ("features",),
        {
            "path": Arg("strings", required=True, path=True, unbounded=True),
            "index_path": Arg("strings", required=True, path=True, unbounded=True),
            # One entry per output: a feature, encoded by conveyor.definition.tfrecord (fn
            # takes DALI's dict of FixedLenFeature / VarLenFeature and encodes it).
            "features": Arg("strings", required=True),
            **READER_ORDER,
            "lazy_init": Arg("bool", default=False),
            "tensor_init_bytes": Arg("int", default=1048576, minimum=0),
            "use_o_direct": Arg("bool", default=False),
            "prefetch_queue_depth": Arg("int", default=1, minimum=1),
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
        outputs_by=tfrecord_outputs,
        doc=("`tf.train.Example` records of TFRecord files, one index file each "
             "(`offset size` per record, as DALI's `tfrecord2idx`; `conveyor tfrecord-index` "
             "writes missing ones). `features` maps names to "
             "`tfrecord.FixedLenFeature(shape, dtype, default)` or "
             "`tfrecord.VarLenFeature([partial_shape,] dtype, default)` "
             "(`from conveyor.dali import tfrecord as tfrec`); the outputs come back as a dict "
             "by feature name. Each record's framing checksums are checked before it is "
             "parsed. See [readers](../guides/readers.md#tfrecord)."),
    ),
    "readers.coco": OpSchema(
        0,
        ("images", "bboxes", "labels"),
        {
            "file_root": Arg("str", required=True, path=True),
            "annotations_file": Arg("str", required=True, path=True),
            "ltrb": Arg("bool", default=False),
            "ratio": Arg("bool", default=False),
            "skip_empty": Arg("bool", default=False),
            "size_threshold": Arg("float", default=0.1),
            "include_iscrowd": Arg("bool", default=True),
            "avoid_class_remapping": Arg("bool", default=False),
            "polygon_masks": Arg("bool", default=False),
            "pixelwise_masks": Arg("bool", default=False),
            "image_ids": Arg("bool", default=False),
            **READER_ORDER,
            "lazy_init": Arg("bool", default=False),
            "tensor_init_bytes": Arg("int", default=1048576, minimum=0),
            "prefetch_queue_depth": Arg("int", default=1, minimum=1),
            **ON_ERROR_ARGS,
            **SEED_ARGS,
        },
        outputs_by=coco_outputs,
        doc=("Images (their files' bytes, undecoded) of a COCO data set, in image id order, "
             "with their boxes (float32, `[x, y, w, h]` or with `ltrb` `[l, t, r, b]`; "
             "`ratio` divides by the image's size), labels (int32, the category's position "
             "from 1, or its id with `avoid_class_remapping`), with `polygon_masks` the "
             "polygons (`[box, first vertex, end vertex]`) and vertices, with "
             "`pixelwise_masks` an int32 `(H, W, 1)` mask of labels rasterised from the "
             "polygons and RLEs as DALI's, with `image_ids` "
             "the image's id. See [readers](../guides/readers.md#coco)."),
    ),
}
