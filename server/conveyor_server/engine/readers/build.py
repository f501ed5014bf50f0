"""A reader's parts, made from its arguments when the pipeline is built, and the map of
readers by operator.

Every reader is three things: the file reader's stage over its samples (the order: a pure
function of seed, epoch and shard settings), a ``SampleSource`` that reads one sample's
outputs by index on the worker threads (none for ``readers.file``, whose samples are its
entries' bytes and labels), and the identity of its data set that every checkpoint
digests. A reader whose data is in object storage says so when it is built
(``reads_objects``): as each batch starts, its source is asked to fetch ahead what the
batch's samples will read (``SampleSource.fetch_ahead``); a reader of local files is not
asked, so its batches cost nothing more. A reader's module registers its builder
(``@register_reader("readers.numpy")``); ``engine/catalog.py`` imports them all, and the
plan binds every reader alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from conveyor.definition.schemas.registry import SCHEMAS
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.file_list import FileEntry
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.identity import DataIdentity
from conveyor_server.engine.data.roots import DataRoots
from conveyor_server.engine.readers.identity import ReaderIdentity
from conveyor_server.engine.stages.file_reader import FileReaderStage


class SampleSource(Protocol):
    def where(self, index: int) -> str:
        """The sample's file as messages name it (below its data root)."""
        ...

    def read(self, index: int) -> list[np.ndarray]:
        """The sample's outputs, one per output of the reader; DataFileError naming the
        file when it cannot be read (the reader's ``on_error`` applies)."""
        ...

    def fetch_ahead(self, indices: Sequence[int]) -> None:
        """Start fetching what reading these samples needs (the objects, or byte ranges of
        objects, in the order they will be read), through the pipeline's one
        ``FetchAhead`` (``ReaderPaths.fetch_ahead``); their reads then take the bytes.
        Called as each batch starts, only for a reader that ``reads_objects``."""
        ...


@dataclass(frozen=True)
class ReaderRequest:
    """What a reader is built from: the operator's place and arguments (defaults filled
    in) and the pipeline's settings."""

    op_type: str
    op_index: int
    args: Mapping[str, Any]
    batch_size: int
    #: The seed its order uses: its ``seed`` argument, else the pipeline's.
    seed: int
    #: The server's data roots, resolved once per pipeline (None: any path).
    roots: DataRoots | None
    limits: EngineLimits
    #: How the pipeline opens data files (beneath their roots, bounded).
    files: DataFiles


@dataclass(frozen=True)
class Reader:
    stage: FileReaderStage
    #: Reads a sample's outputs by index; None for ``readers.file``.
    source: SampleSource | None
    identity: DataIdentity | ReaderIdentity
    #: The number of files (records, samples) its checkpoints digest.
    count: int
    #: ``readers.file``'s entries (empty for the others).
    entries: Sequence[FileEntry] = ()
    #: Whether it reads objects in object storage (``readers.file``'s entries, or what
    #: ``source`` reads), fetched ahead as each batch starts; decided once, when the
    #: reader is built.
    reads_objects: bool = False


ReaderBuilder = Callable[[ReaderRequest], Reader]
#: The reader builders, by operator.
READERS: dict[str, ReaderBuilder] = {}


def register_reader(op_type: str) -> Callable[[ReaderBuilder], ReaderBuilder]:
    if op_type not in SCHEMAS:
        raise ValueError(f"reader {op_type!r} is not declared (declare it in "
                         "conveyor.definition.schemas.registry first)")

    def add(builder: ReaderBuilder) -> ReaderBuilder:
        if op_type in READERS:
            raise ValueError(f"reader {op_type!r} is already registered")
        READERS[op_type] = builder
        return builder
    return add


def build_reader(request: ReaderRequest) -> Reader:
    return READERS[request.op_type](request)


def reader_stage(request: ReaderRequest, count: int, unit: str = "files") -> FileReaderStage:
    """The file reader's stage ordering ``count`` samples as ``request``'s arguments say."""
    args = request.args
    return FileReaderStage(
        request.op_index, count, batch_size=request.batch_size, seed=request.seed,
        num_shards=args["num_shards"], shard_id=args["shard_id"],
        stick_to_shard=args["stick_to_shard"], pad_last_batch=args["pad_last_batch"],
        random_shuffle=args["random_shuffle"],
        shuffle_after_epoch=args.get("shuffle_after_epoch", False),
        shuffle_after_epoch_seed=args.get("shuffle_after_epoch_seed", 0),
        op_type=request.op_type, unit=unit)


def reader_orders(op_type: str) -> list[np.ndarray]:
    """A reader's sample orders under shuffling, sharding and padding, for its behaviour
    probe (every reader orders its samples with the file reader's stage)."""
    out: list[np.ndarray] = []
    for n, options in ((9, {"random_shuffle": True}),
                       (100, {"num_shards": 3, "shard_id": 2, "pad_last_batch": True})):
        stage = FileReaderStage(5, n, batch_size=4, seed=0x5EED, op_type=op_type, **options)
        out += [stage.order(epoch) for epoch in range(2)]
    return out
