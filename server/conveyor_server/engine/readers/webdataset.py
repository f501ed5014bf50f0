"""``fn.readers.webdataset``: samples from WebDataset tar shards, as DALI's reader.

``paths`` names the shards, in reading order; ``index_paths``, if given, one DALI index
file per shard (else each shard is indexed from its tar headers when the pipeline is
built: ``tar_index.py``). The samples are those of the shards in order, each shard's in
archive order, and the reader's order, sharding and padding split that one sequence, as
DALI's loader does.

``ext`` gives one entry per output: that output's extensions, ``;``-separated
alternatives (``"jpg;png"``); an output takes the first member of the sample whose
extension is one of its own (lower-cased on both sides unless
``case_sensitive_extensions``), and a member may feed several outputs. Each output is a
1-D array of ``dtypes`` (``uint8`` by default) over the member's bytes; a member whose size
is not a multiple of its dtype's is refused when the pipeline is built. A sample without a
member for some output (``missing_component_behavior``) gets an empty array there
(``"empty"``, DALI's default, also spelled ``""``), is left out of the data set
(``"skip"``), or stops the build naming it (``"error"``).

The listing keeps, per sample, its shard and each output's offset and size (numpy arrays,
16 bytes per output), and its key for messages; each shard's identity holds its member
index's digest, so a restore over a shard whose members moved is refused naming it.
Shards are opened beneath their data root, as every data file is (``data_paths.py``); a
sample of a shard in object storage is one ranged GET, from its first member to the end of
its last (adjacent in the tar), fetched ahead as its batch starts (``data/fetch_ahead.py``).
A member above ``limits.max_file_bytes`` (members are the data set's files) or a sample
above ``limits.max_batch_bytes`` is RESOURCE_EXHAUSTED before it is read.
"""

from __future__ import annotations

import io
import os
import tarfile
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.file_list import unfit_name
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.readers import tar_index
from conveyor_server.engine.readers.build import (
    Reader,
    ReaderRequest,
    reader_orders,
    reader_stage,
    register_reader,
)
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths
from conveyor_server.engine.readers.identity import ReaderIdentity

OP = "readers.webdataset"


@dataclass(frozen=True)
class Outputs:
    """How members become outputs: each output's extensions and dtype."""

    ext_sets: tuple[frozenset[str], ...]
    dtypes: tuple[np.dtype, ...]
    case_sensitive: bool
    missing: str

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Outputs:
        ext = args["ext"]
        if not ext:
            raise SpecError(OP, "ext", "needs at least one entry (one per output)")
        case_sensitive = bool(args["case_sensitive_extensions"])
        sets = []
        for i, entry in enumerate(ext):
            alternatives = frozenset(e if case_sensitive else e.lower()
                                     for e in entry.split(";") if e)
            if not alternatives:
                raise SpecError(OP, "ext", f"entry {i} ({entry!r}) names no extension")
            sets.append(alternatives)
        dtypes = args["dtypes"] or ("uint8",) * len(sets)
        if len(dtypes) != len(sets):
            raise SpecError(OP, "dtypes", f"has {len(dtypes)} entries for {len(sets)} outputs "
                            "(one per entry of ext)")
        return cls(tuple(sets), tuple(np.dtype(d) for d in dtypes), case_sensitive,
                   args["missing_component_behavior"] or "empty")

    def match(self, sample: tar_index.RawSample, where: str) -> list[int] | None:
        """For each output the index of the member it takes (-1: none, "empty"); None
        when the sample is left out ("skip")."""
        chosen = [-1] * len(self.ext_sets)
        for m, member in enumerate(sample.members):
            ext = member.ext if self.case_sensitive else member.ext.lower()
            for out, alternatives in enumerate(self.ext_sets):
                if chosen[out] < 0 and ext in alternatives:
                    itemsize = self.dtypes[out].itemsize
                    if member.size % itemsize:
                        raise DataFileError(
                            f"{OP}: {where}: member {member.name or member.ext!r} has "
                            f"{member.size} bytes, not a multiple of {self.dtypes[out].name}'s "
                            f"{itemsize} (output {out})")
                    chosen[out] = m
        missing = [out for out, m in enumerate(chosen) if m < 0]
        if missing and self.missing == "skip":
            return None
        if missing and self.missing == "error":
            wanted = ";".join(sorted(self.ext_sets[missing[0]]))
            raise DataFileError(f"{OP}: {where}: sample {sample.key!r} has no member for "
                                f"output {missing[0]} (ext {wanted!r}) and "
                                "missing_component_behavior is 'error'")
        return chosen


def _shard_samples(shard: Located, index_path: str | None,
                   paths: ReaderPaths) -> list[tar_index.RawSample]:
    name = paths.name_of(shard)
    if index_path is not None:
        text = paths.read_text(index_path, "index file")
        try:
            return tar_index.parse_index(text, shard.size)
        except tar_index.ShardError as exc:
            raise DataFileError(f"{OP}: index file {paths.name(index_path)!r} of shard "
                                f"{name!r}: {exc}") from None
    try:
        with paths.open_ranges(shard, "shard") as f:
            return tar_index.read_tar(f, shard.size)  # type: ignore[arg-type]
    except tar_index.ShardError as exc:
        raise DataFileError(f"{OP}: shard {name!r} {exc}") from None
    except OSError as exc:
        raise DataFileError(f"{OP}: cannot read shard {name!r}: {exc.strerror or exc}") from None


class WebdatasetIndex:
    """Every sample of the data set: its shard, each output's member (offset and size, -1
    for none) and its key."""

    def __init__(self, args: Mapping[str, Any], paths: ReaderPaths) -> None:
        shard_paths, index_paths = args["paths"], args["index_paths"] or ()
        if not shard_paths:
            raise SpecError(OP, "paths", "needs at least one tar shard")
        if index_paths and len(index_paths) != len(shard_paths):
            raise SpecError(OP, "index_paths", f"has {len(index_paths)} entries for "
                            f"{len(shard_paths)} paths (one index file per shard, or none)")
        for argument, values in (("paths", shard_paths), ("index_paths", index_paths)):
            for i, value in enumerate(values):
                if why := unfit_name(value):
                    raise SpecError(OP, argument, f"entry {i} {value!r} {why}")
        self.outputs = Outputs.from_args(args)
        self.shards: list[Located] = []
        #: Each shard's member index digest (what its identity adds to its file's).
        self.digests: list[str] = []
        # Flat typed buffers, not a Python object per sample: data sets have millions.
        shard_of, spans, key_ends, keys = array("i"), array("q"), array("q"), bytearray()
        for s, given in enumerate(shard_paths):
            shard = paths.locate(given, "shard")
            raw = _shard_samples(shard, index_paths[s] if index_paths else None, paths)
            self.shards.append(shard)
            self.digests.append(tar_index.index_digest(raw))
            where = f"shard {paths.name_of(shard)!r}"
            for sample in raw:
                chosen = self.outputs.match(sample, where)
                if chosen is None:
                    continue
                shard_of.append(s)
                keys += sample.key.encode(tar_index.NAME_ENCODING, tar_index.NAME_ERRORS)
                key_ends.append(len(keys))
                for m in chosen:
                    member = sample.members[m] if m >= 0 else None
                    spans.extend((member.offset, member.size) if member else (-1, 0))
        if not shard_of:
            raise InvalidArgument(f"{OP}: the shards hold no sample with the members ext "
                                  f"asks for ({len(shard_paths)} shards)")
        self.count = len(shard_of)
        self.shard_of = np.frombuffer(shard_of, dtype=np.int32)
        self.spans = np.frombuffer(spans, dtype=np.int64).reshape(
            self.count, len(self.outputs.ext_sets), 2)
        self._keys = bytes(keys)
        self._key_ends = np.frombuffer(key_ends, dtype=np.int64)

    def key(self, index: int) -> str:
        """The sample's key as messages name it (a byte that is not UTF-8 as ``\\xNN``)."""
        start = int(self._key_ends[index - 1]) if index else 0
        return self._keys[start:int(self._key_ends[index])].decode("utf-8", "backslashreplace")


class WebdatasetSource:
    """Reads one sample's members by offset, each output's into an array of its dtype."""

    def __init__(self, index: WebdatasetIndex, paths: ReaderPaths,
                 limits: EngineLimits) -> None:
        self._index = index
        self._paths = paths
        self._dtypes = index.outputs.dtypes
        self._limits = limits

    def where(self, index: int) -> str:
        shard = self._index.shards[self._index.shard_of[index]]
        return f"{self._paths.name_of(shard)}:{self._index.key(index)}"

    def _check(self, index: int, spans: list[list[int]]) -> None:
        """Refuse a member above ``limits.max_file_bytes`` or a sample above
        ``limits.max_batch_bytes`` before allocating it."""
        for what, size, limit, key in (
                ("a member of", max(size for _, size in spans), self._limits.max_file_bytes,
                 "max_file_bytes"),
                ("", sum(size for _, size in spans), self._limits.max_batch_bytes,
                 "max_batch_bytes")):
            if limit is not None and size > limit:
                raise ResourceExhausted(
                    f"{OP}: {what + ' ' if what else ''}{self.where(index)!r} holds {size:,} "
                    f"bytes, above the server's limit limits.{key} = {limit:,}; it was not "
                    "read")

    def fetch_ahead(self, indices: Sequence[int]) -> None:
        """Start fetching these samples (one byte range each: its members) from object
        storage; a sample above a limit is not fetched (its read refuses it)."""
        wanted: list[tuple[Located, tuple[int, int] | None]] = []
        for index in indices:
            shard = self._index.shards[self._index.shard_of[index]]
            spans = self._index.spans[index].tolist()
            try:
                self._check(index, spans)
            except ResourceExhausted:
                continue
            if (found := _extent(spans)) is not None:
                wanted.append((shard, found))
        self._paths.fetch_ahead(wanted)

    def read(self, index: int) -> list[np.ndarray]:
        shard = self._index.shards[self._index.shard_of[index]]
        spans = self._index.spans[index].tolist()
        self._check(index, spans)
        if self._paths.is_object(shard):
            return self._read_object(shard, spans, index)
        fd = self._paths.open(shard, "shard")
        try:
            size = os.fstat(fd).st_size
            if size != shard.size:
                raise DataFileError(
                    f"{OP}: shard {self._paths.name_of(shard)!r} has {size} bytes, but "
                    f"{shard.size} when the pipeline indexed it: the data set changed under "
                    "the pipeline")
            return [self._member(fd, offset, length, dtype, index)
                    for (offset, length), dtype in zip(spans, self._dtypes, strict=True)]
        except OSError as exc:
            raise DataFileError(f"{OP}: cannot read shard {self._paths.name_of(shard)!r}: "
                                f"{exc.strerror or exc}") from None
        finally:
            os.close(fd)

    def _read_object(self, shard: Located, spans: list[tuple[int, int]],
                     index: int) -> list[np.ndarray]:
        """A sample of a shard in object storage: its members (adjacent in the tar) in
        one ranged GET, from the first to the end of the last (fetched ahead as its batch
        started: ``fetch_ahead``)."""
        found = _extent(spans)
        start, end = found or (0, 0)
        data = self._paths.read_range(shard, start, end - start, "shard") if found else b""
        if len(data) != end - start:
            raise DataFileError(f"{OP}: {self.where(index)!r}: the shard ends inside the "
                                f"sample, at byte {start + len(data):,}")
        out = []
        for (offset, length), dtype in zip(spans, self._dtypes, strict=True):
            array = np.empty(length // dtype.itemsize, dtype=dtype)
            if offset >= 0:
                array.view(np.uint8)[:] = np.frombuffer(
                    data, np.uint8, length, offset - start)
            out.append(array)
        return out

    def _member(self, fd: int, offset: int, length: int, dtype: np.dtype,
                index: int) -> np.ndarray:
        out = np.empty(length // dtype.itemsize, dtype=dtype)
        if offset < 0:
            return out
        view = out.view(np.uint8).data
        filled = 0
        while filled < length:
            got = os.preadv(fd, [view[filled:]], offset + filled)
            if not got:
                raise DataFileError(f"{OP}: {self.where(index)!r}: the shard ends inside "
                                    f"the member at byte {offset + filled:,}")
            filled += got
        return out


def _extent(spans: list[tuple[int, int]]) -> tuple[int, int] | None:
    """[start, end) of a sample's members in its shard, from the first to the end of the
    last; None for a sample without any."""
    present = [(o, n) for o, n in spans if o >= 0]
    if not present:
        return None
    return min(o for o, _ in present), max(o + n for o, n in present)


@register_reader(OP)
def build_webdataset_reader(request: ReaderRequest) -> Reader:
    paths = ReaderPaths(OP, request.roots, request.files)
    index = WebdatasetIndex(request.args, paths)
    identity = ReaderIdentity(paths, index.shards, request.args["verify"],
                              derived=index.digests, kind="shard")
    return Reader(reader_stage(request, index.count, "samples"),
                  WebdatasetSource(index, paths, request.limits), identity, identity.count,
                  reads_objects=any(paths.is_object(s) for s in index.shards))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


def _tar() -> bytes:
    f = io.BytesIO()
    members = [("a/000.jpg", 5), ("a/000.cls", 4), ("a/000.seg.png", 3), ("a/.hidden", 2),
               ("a/001.JPG", 6), ("a/001.txt", 1), ("002.cls", 8), ("002.jpeg", 7),
               ("003", 2), ("004.cls", 4)]
    with tarfile.open(fileobj=f, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, kind in (("a", tarfile.DIRTYPE), ("a/link.jpg", tarfile.SYMTYPE)):
            entry = tarfile.TarInfo(name)
            entry.type, entry.mtime = kind, 0
            archive.addfile(entry)
        for i, (member, size) in enumerate(members):
            info = tarfile.TarInfo(member)
            info.size, info.mtime = size, 0
            archive.addfile(info, io.BytesIO(bytes([i]) * size))
    return f.getvalue()


@source_probe("readers.webdataset")
def _webdataset() -> list[np.ndarray]:
    out = reader_orders("readers.webdataset")
    data = _tar()
    index = "v1.2 2\njpg 512 5 x.jpg cls 1536 4 x.cls\ncls 2560 8 y.cls\n"
    groups = (tar_index.read_tar(io.BytesIO(data), len(data)),
              tar_index.parse_index(index, len(data)))
    for samples in groups:
        out.append(np.frombuffer(tar_index.index_digest(samples).encode(), dtype=np.uint8))
        for ext, case, missing in (("jpg;jpeg", True, "empty"), ("jpg;jpeg", False, "skip"),
                                   ("cls", True, "skip")):
            rules = Outputs.from_args({"ext": (ext, "cls"), "dtypes": ("uint8", "int32"),
                                       "case_sensitive_extensions": case,
                                       "missing_component_behavior": missing})
            for sample in samples:
                chosen = rules.match(sample, "probe")
                keys = np.frombuffer(sample.key.encode(), dtype=np.uint8)
                out += [keys, np.asarray(chosen if chosen is not None else [], np.int64)]
    return out
