"""``readers.file``: files listed by ``file_root`` (one folder per label), ``file_list`` or
``files`` (``engine/data/file_list.py``), each sample a file's bytes and its label. Its
identity digests the listing (``engine/data/identity.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conveyor_server.engine.data import file_list
from conveyor_server.engine.data.identity import DataIdentity
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.readers.build import (
    Reader,
    ReaderRequest,
    reader_stage,
    register_reader,
)
from conveyor_server.engine.stages.file_reader import FileReaderStage

OP = "readers.file"


@register_reader(OP)
def build_file_reader(request: ReaderRequest) -> Reader:
    entries = file_list.resolve(request.args, request.roots, request.files.objects)
    return Reader(reader_stage(request, len(entries)), None,
                  DataIdentity(entries, request.args["verify"], request.files), len(entries),
                  entries,
                  # (It lists objects or files, never both: its first entry tells.)
                  reads_objects=bool(entries)
                  and request.files.object_of(entries[0]) is not None)


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


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
