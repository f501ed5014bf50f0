"""WebDataset shards: the members of a tar archive and how they group into samples.

A shard is indexed once, when the pipeline is built, from its tar headers (``tarfile``
reads each header and seeks over the data) or from a DALI index file (``wds2idx``, format
v1.1 or v1.2). Either gives, for each regular file, where its data starts and its size, so
at run time a sample's members are read by seek, without walking the archive.

Samples follow WebDataset's keys, as DALI groups them: a member's key is its name up to
the first dot of its last path component and its extension is the rest (``a/b.seg.png``:
key ``a/b``, extension ``seg.png``); consecutive members sharing a key form one sample; a
hidden file (key empty or ending in ``/``) belongs to none. An index file lists samples
already grouped, one per line.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

BLOCK = tarfile.BLOCKSIZE
#: How member names become bytes again: ``tarfile`` decodes them as UTF-8, keeping bytes
#: that are not UTF-8 (a Latin-1 name) as surrogates, which this turns back into them.
NAME_ENCODING, NAME_ERRORS = "utf-8", "surrogateescape"
INDEX_VERSIONS = ("v1.1", "v1.2")


class ShardError(ValueError):
    """What is wrong with a shard or its index file (the reader names the file)."""


@dataclass(frozen=True)
class Member:
    #: The member's name in the archive ("" from a v1.1 index file, which has none).
    name: str
    ext: str
    #: Where its data starts in the shard, and its size.
    offset: int
    size: int


@dataclass(frozen=True)
class RawSample:
    """Consecutive members sharing a key, before they are matched to outputs."""

    key: str
    members: tuple[Member, ...]


def split_name(name: str) -> tuple[str, str]:
    """(key, extension) of a member name."""
    start = name.rfind("/") + 1
    dot = name.find(".", start)
    return (name, "") if dot < 0 else (name[:dot], name[dot + 1:])


def _ends_cleanly(f: BinaryIO, offset: int) -> bool:
    """Whether the archive ends at ``offset``: end of file or a block of zeros (where
    ``tarfile`` stopped; it also stops, silently, at a header that does not parse)."""
    f.seek(offset)
    block = f.read(BLOCK)
    return not block or block == bytes(BLOCK)


def read_tar(f: BinaryIO, size: int) -> list[RawSample]:
    """The samples of the tar archive open as ``f`` (``size`` bytes, as listed)."""
    samples: list[RawSample] = []
    members: list[Member] = []
    key = ""
    try:
        with tarfile.open(fileobj=f, mode="r:") as archive:
            while (info := archive.next()) is not None:
                if not info.isreg():
                    continue
                if info.issparse():
                    raise ShardError(f"member {info.name!r} is a sparse file, which a shard "
                                     "cannot hold")
                if info.offset_data + info.size > size:
                    raise ShardError(f"is truncated: member {info.name!r} ends at byte "
                                     f"{info.offset_data + info.size:,}, the file has "
                                     f"{size:,}")
                name_key, ext = split_name(info.name)
                if not name_key or name_key.endswith("/"):
                    continue
                if members and name_key != key:
                    samples.append(RawSample(key, tuple(members)))
                    members = []
                key = name_key
                members.append(Member(info.name, ext, info.offset_data, info.size))
            end = archive.offset
    except tarfile.TarError as exc:
        raise ShardError(f"is not a readable tar archive ({exc})") from None
    if not _ends_cleanly(f, end):
        raise ShardError(f"is not a readable tar archive (no valid tar header at byte "
                         f"{end:,})")
    if members:
        samples.append(RawSample(key, tuple(members)))
    return samples


def parse_index(text: str, shard_size: int) -> list[RawSample]:
    """The samples an index file (``wds2idx``) lists for a shard of ``shard_size`` bytes;
    ShardError names the line that is wrong."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] not in INDEX_VERSIONS or not head[1].isdigit():
        raise ShardError(f"line 1: expected '<version> <samples>' with version "
                         f"{' or '.join(INDEX_VERSIONS)}, got {lines[0][:80] if lines else ''!r}")
    fields = 4 if head[0] == "v1.2" else 3
    count = int(head[1])
    body = [line for line in lines[1:] if line.strip()]
    if count < 1 or count != len(body):
        raise ShardError(f"line 1: declares {count} samples, the file lists {len(body)}")
    samples = []
    for number, line in enumerate(body, 2):
        parts = line.split()
        if not parts or len(parts) % fields:
            raise ShardError(f"line {number}: expected groups of {fields} fields "
                             f"(ext offset size{' filename' if fields == 4 else ''})")
        members = []
        for i in range(0, len(parts), fields):
            ext, offset, size = parts[i], parts[i + 1], parts[i + 2]
            if not (offset.isdigit() and size.isdigit()):
                raise ShardError(f"line {number}: offset and size must be integers, got "
                                 f"{offset!r} and {size!r}")
            start, length = int(offset), int(size)
            if start % BLOCK:
                raise ShardError(f"line {number}: offset {start} is not a multiple of the tar "
                                 f"block size ({BLOCK})")
            if start + length > shard_size:
                raise ShardError(f"line {number}: member data ends at byte {start + length:,}, "
                                 f"beyond the shard's {shard_size:,} bytes")
            members.append(Member(parts[i + 3] if fields == 4 else "", ext, start, length))
        key = split_name(members[0].name)[0] if members[0].name else f"line {number}"
        samples.append(RawSample(key, tuple(members)))
    return samples


def index_digest(samples: Sequence[RawSample]) -> str:
    """SHA-256 of a shard's member index: every member's extension, offset, size, name."""
    h = hashlib.sha256()
    for sample in samples:
        h.update(b"\n")
        for m in sample.members:
            h.update(f"{m.ext}\0{m.offset}\0{m.size}\0{m.name}\0".encode(NAME_ENCODING,
                                                                     NAME_ERRORS))
    return h.hexdigest()
