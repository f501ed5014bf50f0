"""DALI's ``nvidia.dali.tfrecord`` for ``fn.readers.tfrecord``, and the TFRecord index tools.

``FixedLenFeature(shape, dtype, default_value)`` and ``VarLenFeature([partial_shape,]
dtype, default_value)`` describe the features to read, with the types ``int64``,
``float32`` and ``string`` (also importable as ``conveyor.dali.tfrecord``)::

    from conveyor.dali import tfrecord as tfrec
    inputs = fn.readers.tfrecord(path=files, index_path=indexes, features={
        "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
        "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)})
    jpegs, labels = inputs["image/encoded"], inputs["image/class/label"]

A spec carries each feature as one string (``encode_feature``; the server reads it back
with ``decode_feature``, which checks every field).

Index files are DALI's (``tfrecord2idx``): one line ``offset size`` per record, the size
counting the record's framing. ``write_index`` makes one from a TFRecord file, checking
every record's framing (its length's and its data's masked CRC-32C) on the way;
``build_missing_indexes`` makes those that do not exist yet; the command line
``conveyor tfrecord-index FILE...`` runs it.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.definition.crc32c import masked_crc32c
from conveyor.errors import SpecError

int64 = "int64"
float32 = "float32"
string = "string"
DTYPES = (int64, float32, string)
OP = "readers.tfrecord"

#: The most dimensions a feature's shape may have, and elements a fixed feature may hold.
MAX_FEATURE_DIMS = 8
MAX_FEATURE_ELEMENTS = 1 << 24
#: A record's framing: its length (uint64) and the length's masked CRC, then the data and
#: the data's masked CRC.
HEADER_BYTES = 12
FOOTER_BYTES = 4


@dataclass(frozen=True)
class Feature:
    """One feature to read: ``fixed`` (``FixedLenFeature``: exactly ``shape``'s elements,
    ``default`` where the record lacks it) or ``var`` (``VarLenFeature``: any number, shaped
    ``(-1, *shape)``; an empty output where the record lacks it)."""

    kind: str
    shape: tuple[int, ...]
    dtype: str
    default: Any

    def encode(self, name: str) -> str:
        default = self.default
        if isinstance(default, bytes):
            default = default.decode("latin-1")
        return json.dumps({"name": name, "kind": self.kind, "shape": list(self.shape),
                           "dtype": self.dtype, "default": default}, sort_keys=True)


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    try:
        shape = tuple(value)
    except TypeError:
        raise SpecError(OP, "features", f"{what}: shape {value!r} is not a list of "
                        "integers") from None
    if len(shape) > MAX_FEATURE_DIMS or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise SpecError(OP, "features", f"{what}: shape {list(shape)!r} must be at most "
                        f"{MAX_FEATURE_DIMS} non-negative integers")
    elements = 1
    for d in shape:
        elements *= d
    if elements > MAX_FEATURE_ELEMENTS:
        raise SpecError(OP, "features", f"{what}: shape {list(shape)!r} holds {elements:,} "
                        f"elements, above {MAX_FEATURE_ELEMENTS:,}")
    return shape


def _checked(kind: str, shape: tuple[int, ...], dtype: Any, default: Any, what: str) -> Feature:
    if dtype not in DTYPES:
        raise SpecError(OP, "features", f"{what}: dtype {dtype!r} is not one of tfrecord.int64, "
                        "tfrecord.float32, tfrecord.string")
    if dtype == string:
        if default is None:
            default = ""
        if isinstance(default, bytes):
            default = default.decode("latin-1")
        if not isinstance(default, str):
            raise SpecError(OP, "features", f"{what}: the default of a string feature must be "
                            f"a string, got {default!r}")
        if kind == "var":
            raise SpecError(OP, "features", f"{what}: a string feature must be a "
                            "FixedLenFeature (its output is the first string's bytes)")
    else:
        if default is None:
            default = 0
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise SpecError(OP, "features", f"{what}: the default of a {dtype} feature must "
                            f"be a number, got {default!r}")
        if dtype == int64:
            if default != int(default) or not -(1 << 63) <= int(default) < (1 << 63):
                raise SpecError(OP, "features", f"{what}: default {default!r} is not an int64")
            default = int(default)
        else:
            default = float(default)
    return Feature(kind, shape, dtype, default)


def FixedLenFeature(shape: Any, dtype: str, default_value: Any = None) -> Feature:  # noqa: N802
    """A feature with exactly ``shape``'s elements in every record (DALI's and TensorFlow's
    spelling); a record without it gets ``default_value`` in every element. A string
    feature's output is its first value's bytes (uint8), whatever ``shape``."""
    return _checked("fixed", _shape(shape, "FixedLenFeature"), dtype, default_value,
                    "FixedLenFeature")


def VarLenFeature(*args: Any) -> Feature:  # noqa: N802
    """``VarLenFeature(dtype, default_value)`` or ``VarLenFeature(partial_shape, dtype,
    default_value)``: every value the record holds, shaped ``(-1, *partial_shape)``."""
    if len(args) == 2:
        return _checked("var", (), args[0], args[1], "VarLenFeature")
    if len(args) == 3:
        return _checked("var", _shape(args[0], "VarLenFeature"), args[1], args[2],
                        "VarLenFeature")
    raise SpecError(OP, "features", "VarLenFeature takes (dtype, default_value) or "
                    f"(partial_shape, dtype, default_value), got {len(args)} arguments")


def encode_features(features: Any) -> list[str]:
    """``fn.readers.tfrecord``'s ``features`` dict as the spec's strings, one per feature."""
    if not isinstance(features, dict) or not features:
        raise SpecError(OP, "features", "needs a dict of feature name -> "
                        "tfrecord.FixedLenFeature / VarLenFeature, with at least one entry")
    out = []
    for name, spec in features.items():
        if not isinstance(name, str) or not name:
            raise SpecError(OP, "features", f"feature names must be non-empty strings, got "
                            f"{name!r}")
        if not isinstance(spec, Feature):
            raise SpecError(OP, "features", f"feature {name!r}: got {spec!r}, expected "
                            "tfrecord.FixedLenFeature(...) or tfrecord.VarLenFeature(...)")
        out.append(spec.encode(name))
    return out


def decode_feature(text: str) -> tuple[str, Feature]:
    """One spec string back into its name and feature, every field checked (a spec may
    come from anywhere)."""
    try:
        fields = json.loads(text)
    except ValueError:
        raise SpecError(OP, "features", f"entry {text[:60]!r} is not an encoded feature "
                        "(use fn.readers.tfrecord(features={...}))") from None
    if not isinstance(fields, dict) or set(fields) != {"name", "kind", "shape", "dtype",
                                                       "default"}:
        raise SpecError(OP, "features", f"entry {text[:60]!r} is not an encoded feature")
    name, kind = fields["name"], fields["kind"]
    if not isinstance(name, str) or not name or kind not in ("fixed", "var"):
        raise SpecError(OP, "features", f"entry {text[:60]!r} is not an encoded feature")
    what = f"feature {name!r}"
    if not isinstance(fields["shape"], list):
        raise SpecError(OP, "features", f"{what}: shape must be a list")
    return name, _checked(kind, _shape(fields["shape"], what), fields["dtype"],
                          fields["default"], what)


def feature_names(entries: Any) -> tuple[str, ...]:
    """The output names a spec's ``features`` give: each entry's name, read without
    checking the rest (the reader's build checks each entry and names what is wrong); none
    where an entry has no name."""
    if not isinstance(entries, (list, tuple)):
        return ()
    names = []
    for entry in entries:
        try:
            fields = json.loads(entry) if isinstance(entry, str) else None
        except ValueError:
            return ()
        if not isinstance(fields, dict) or not isinstance(fields.get("name"), str):
            return ()
        names.append(fields["name"])
    return tuple(names)


# -- index files ------------------------------------------------------------------------------


class RecordFramingError(ValueError):
    """What is wrong with a record's framing (the caller names the file)."""


def check_header(header: bytes, offset: int) -> int:
    """The data length a record's 12-byte header declares, its CRC checked."""
    if len(header) < HEADER_BYTES:
        raise RecordFramingError(f"the record at byte {offset:,} is cut short in its "
                                 "header")
    (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:12])
    if masked_crc32c(header[:8]) != crc:
        raise RecordFramingError(f"the record at byte {offset:,}: its length's checksum does "
                                 "not match (not a TFRecord file, or damaged)")
    return length


def scan_records(path: str, max_record_bytes: int | None = None) -> list[tuple[int, int]]:
    """Every record of the TFRecord file ``path`` as (offset, size with framing), each
    record's framing and data checksums checked."""
    out = []
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        offset = 0
        while offset < size:
            length = check_header(f.read(HEADER_BYTES), offset)
            total = HEADER_BYTES + length + FOOTER_BYTES
            if offset + total > size:
                raise RecordFramingError(f"the record at byte {offset:,} declares {length:,} "
                                         f"bytes, past the end of the file ({size:,} bytes)")
            if max_record_bytes is not None and length > max_record_bytes:
                raise RecordFramingError(f"the record at byte {offset:,} holds {length:,} "
                                         f"bytes, above the limit of {max_record_bytes:,}")
            data = f.read(length)
            (crc,) = struct.unpack("<I", f.read(FOOTER_BYTES))
            if masked_crc32c(data) != crc:
                raise RecordFramingError(f"the record at byte {offset:,}: its data's checksum "
                                         "does not match (damaged)")
            out.append((offset, total))
            offset += total
    return out


def write_index(path: str, index_path: str) -> int:
    """Write DALI's index file for the TFRecord file ``path``; the number of records. The
    index is written beside and renamed into place, so a reader never sees half of it."""
    records = scan_records(path)
    partial = f"{index_path}.partial"
    with open(partial, "w", encoding="ascii") as f:
        f.writelines(f"{offset} {size}\n" for offset, size in records)
    os.replace(partial, index_path)
    return len(records)


def index_path_for(path: str) -> str:
    """Where ``build_missing_indexes`` puts a file's index by default: ``FILE.idx``."""
    return f"{path}.idx"


def build_missing_indexes(paths: Sequence[str],
                          index_paths: Sequence[str] | None = None) -> list[str]:
    """Write the index of every TFRecord file in ``paths`` whose index file (the matching
    entry of ``index_paths``, else ``FILE.idx``) does not exist; the index files written."""
    if index_paths is not None and len(index_paths) != len(paths):
        raise ValueError(f"{len(index_paths)} index paths for {len(paths)} TFRecord files "
                         "(one each, or none)")
    written = []
    for i, path in enumerate(paths):
        index = index_paths[i] if index_paths is not None else index_path_for(path)
        if not os.path.exists(index):
            write_index(path, index)
            written.append(index)
    return written


def index_command(files: Sequence[str], index_dir: str | None, force: bool) -> int:
    """``conveyor tfrecord-index``: write the missing index files (all of them with
    ``force``), one line a file; 1 at the first file that is not a sound TFRecord file."""
    for path in files:
        index = (os.path.join(index_dir, os.path.basename(path) + ".idx") if index_dir
                 else index_path_for(path))
        if os.path.exists(index) and not force:
            print(f"{index}: exists (--force rewrites it)")
            continue
        try:
            count = write_index(path, index)
        except (OSError, RecordFramingError) as exc:
            print(f"conveyor: {path}: {exc}", file=sys.stderr)
            return 1
        print(f"{index}: {count} records")
    return 0
