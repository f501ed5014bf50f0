"""A reader's parts, made from its arguments when the pipeline is built.

Every reader here is three things: the file reader's stage over its samples (the order: a
pure function of seed, epoch and shard settings), a ``SampleSource`` that reads one
sample's outputs by index on the worker threads, and the identity of its data set that
every checkpoint digests. The plan binds them like the file reader's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conveyor_server.engine.data_roots import DataRoots
from conveyor_server.engine.limits import EngineLimits
from conveyor_server.engine.readers import caffe, numpy_reader, webdataset
from conveyor_server.engine.readers.data_paths import ReaderPaths
from conveyor_server.engine.readers.identity import ReaderIdentity
from conveyor_server.engine.readers.lmdb_records import LmdbRecords
from conveyor_server.engine.stages.file_reader import FileReaderStage

#: The readers made here (``readers.file`` is planned on its own).
READERS = (numpy_reader.OP, webdataset.OP, caffe.CAFFE, caffe.CAFFE2)


class SampleSource(Protocol):
    def where(self, index: int) -> str:
        """The sample's file as messages name it (below its data root)."""
        ...

    def read(self, index: int) -> list[np.ndarray]:
        """The sample's outputs, one per output of the reader; DataFileError naming the
        file when it cannot be read (the reader's ``on_error`` applies)."""
        ...


@dataclass(frozen=True)
class Reader:
    stage: FileReaderStage
    source: SampleSource
    identity: ReaderIdentity


def _stage(op_type: str, op_index: int, count: int, args: Mapping[str, Any],
           batch_size: int, seed: int, unit: str) -> FileReaderStage:
    return FileReaderStage(
        op_index, count, batch_size=batch_size, seed=seed,
        num_shards=args["num_shards"], shard_id=args["shard_id"],
        stick_to_shard=args["stick_to_shard"], pad_last_batch=args["pad_last_batch"],
        random_shuffle=args["random_shuffle"],
        shuffle_after_epoch=args.get("shuffle_after_epoch", False),
        shuffle_after_epoch_seed=args.get("shuffle_after_epoch_seed", 0), op_type=op_type,
        unit=unit)


def build_reader(op_type: str, op_index: int, args: Mapping[str, Any], *, batch_size: int,
                 seed: int, roots: DataRoots | None, limits: EngineLimits) -> Reader:
    """``roots``: the server's data roots, resolved once per pipeline (None: any path)."""
    paths = ReaderPaths(op_type, roots)
    if op_type == numpy_reader.OP:
        files = numpy_reader.list_files(args, paths)
        return Reader(_stage(op_type, op_index, len(files), args, batch_size, seed, "files"),
                      numpy_reader.NumpySource(files, paths, limits),
                      ReaderIdentity(paths, files, args["verify"]))
    if op_type == webdataset.OP:
        index = webdataset.WebdatasetIndex(args, paths)
        return Reader(_stage(op_type, op_index, index.count, args, batch_size, seed, "samples"),
                      webdataset.WebdatasetSource(index, paths, limits),
                      ReaderIdentity(paths, index.shards, args["verify"],
                                     derived=index.digests, kind="shard"))
    if op_type in (caffe.CAFFE, caffe.CAFFE2):
        records = LmdbRecords(op_type, args["path"], paths, limits)
        parse = caffe.DatumParser(args, limits) if op_type == caffe.CAFFE else \
            caffe.TensorProtosParser(args, limits)
        return Reader(_stage(op_type, op_index, records.count, args, batch_size, seed,
                             "records"),
                      caffe.LmdbSource(op_type, records, parse),
                      ReaderIdentity(paths, records.files, args["verify"],
                                     derived=records.digests, kind="database",
                                     derived_name="keys"))
    raise KeyError(f"no reader {op_type!r} is built here")
