"""The schemas of ``readers.numpy`` and ``readers.webdataset``: DALI's argument names.

Both share the file reader's order and sharding arguments (``READER_ORDER``; the engine
orders every reader with one stage). Arguments DALI uses to tune its own I/O
(``initial_fill``, ``read_ahead``, ``dont_use_mmap``, ``cache_header_information``,
``use_o_direct``) are accepted so that DALI pipelines port unchanged; they change nothing.
"""

from __future__ import annotations

from conveyor.schema_args import ON_ERROR_ARGS, SEED_ARGS, Arg, OpSchema

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

READER_SCHEMAS = {
    "readers.numpy": OpSchema(
        0,
        ("data",),
        {
            "file_root": Arg("str", default=""),
            "file_filter": Arg("str", default="*.npy"),
            "file_list": Arg("str", default=""),
            "files": Arg("strings"),
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
            "paths": Arg("strings", required=True),
            "index_paths": Arg("strings"),
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
}
