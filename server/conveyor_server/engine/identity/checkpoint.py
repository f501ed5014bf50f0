"""Checkpoint blobs: seal a body with its checksum, open and verify one.

A blob is a serialized ``SealedCheckpoint``: a format version, the serialized
``CheckpointBody`` and its SHA-256. Opening checks all three and that the body's
fingerprint is its own spec's; ``verify_against`` names the first difference between a
checkpoint and the pipeline it is restored into.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from google.protobuf.message import DecodeError

from conveyor.definition import spec as specs
from conveyor.errors import CorruptCheckpoint, DataChanged, EngineMismatch, SpecMismatch
from conveyor.v1 import checkpoint_pb2, pipeline_pb2
from conveyor_server.engine.identity import engine_id

FORMAT_VERSION = 1


def seal(body: checkpoint_pb2.CheckpointBody) -> bytes:
    return seal_payload(body.SerializeToString(deterministic=True))


def seal_payload(payload: bytes) -> bytes:
    """Seal a serialized ``CheckpointBody``."""
    sealed = checkpoint_pb2.SealedCheckpoint(
        format_version=FORMAT_VERSION, body=payload, sha256=hashlib.sha256(payload).digest())
    return sealed.SerializeToString(deterministic=True)


#: What to pass instead of bytes that are no checkpoint at all.
PASS_INSTEAD = ("pass checkpoint= the bytes a Conveyor pipeline's checkpoint() returned, "
                "unchanged (or, to Client.restore, a stored checkpoint or its id); a DALI "
                "pipeline's checkpoint is not one: run the pipeline under Conveyor from its "
                "start")


def open_blob(blob: bytes) -> checkpoint_pb2.CheckpointBody:
    """Parse and check a blob; CorruptCheckpoint says what is wrong with it."""
    if not blob:
        raise CorruptCheckpoint(f"the checkpoint is empty (0 bytes): {PASS_INSTEAD}")
    try:
        sealed = checkpoint_pb2.SealedCheckpoint.FromString(blob)
    except DecodeError:
        sealed = None
    if sealed is None or (sealed.format_version == 0 and not sealed.body):
        raise CorruptCheckpoint(f"these {len(blob)} bytes are not a Conveyor checkpoint "
                                f"(they do not start as one): {PASS_INSTEAD}")
    if sealed.format_version != FORMAT_VERSION:
        raise CorruptCheckpoint(f"checkpoint format version {sealed.format_version} is not "
                                f"supported (this server reads {FORMAT_VERSION})")
    if hashlib.sha256(sealed.body).digest() != sealed.sha256:
        raise CorruptCheckpoint(f"checkpoint checksum mismatch ({len(blob)} bytes): "
                                "truncated or altered")
    try:
        body = checkpoint_pb2.CheckpointBody.FromString(sealed.body)
    except DecodeError as exc:
        raise CorruptCheckpoint(f"checkpoint body does not decode ({exc})") from None
    if specs.fingerprint(body.spec) != body.fingerprint:
        raise CorruptCheckpoint("checkpoint fingerprint does not match the spec it carries")
    return body


def verify_against(
    body: checkpoint_pb2.CheckpointBody,
    spec: pipeline_pb2.PipelineSpec,
    engine: checkpoint_pb2.EngineId,
    file_lists: Mapping[int, checkpoint_pb2.FileListDigest],
    first_change: Callable[[int, bytes], str | None] | None = None,
) -> None:
    """Refuse a checkpoint made by another spec, data set, or an engine that computes other
    bytes (``engine`` is this server's identity for ``spec``), naming the difference.
    ``first_change(op, earlier digest)`` names the first changed file of a reader, where
    the earlier listing can be found. A ``spec`` whose seed was drawn (none was given) takes
    the checkpoint's first (``conveyor.definition.spec.with_checkpoint_seed``)."""
    diff = specs.first_difference(body.spec, specs.with_checkpoint_seed(spec, body.spec))
    if diff is not None:
        raise SpecMismatch(f"checkpoint was made by a different pipeline: {diff}")
    diff = engine_id.difference(body.engine, engine)
    if diff is not None:
        raise EngineMismatch(f"checkpoint was made by an engine that computes other "
                                 f"bytes: {diff}")
    saved = {d.op: d for d in body.file_lists}
    for op, now in sorted(file_lists.items()):
        then = saved.get(op)
        label = f"reader {now.reader_name!r} (op {op})" if now.reader_name else f"reader op {op}"
        if then is None:
            raise DataChanged(f"{label}: checkpoint has no file list digest")
        if then.sha256 != now.sha256 or then.num_files != now.num_files:
            change = first_change(op, then.sha256) if first_change is not None else None
            raise DataChanged(
                f"{label}: the data set changed: checkpoint lists {then.num_files} files "
                f"(sha256 {then.sha256.hex()[:12]}), the data now has {now.num_files} files "
                f"(sha256 {now.sha256.hex()[:12]})"
                + (f"; first change: {change}" if change else
                   " (path, size, label and modification time or contents are compared)"))
