"""Conveyor's exception tree, in one place.

Deep code raises these; the server maps each to its gRPC status code at the servicer
boundary, with a ``google.rpc.Status`` whose ``ErrorInfo`` detail carries the error's
machine-readable ``reason`` and its ``metadata`` (the holder, the checkpoint id, ...), and
the client raises the same class back from a failed RPC. So ``except
conveyor.errors.Fenced`` works in-process and remotely, and ``exc.metadata["holder"]``
names the new holder.

    ConveyorError                                   reason
    ├── InvalidArgument        INVALID_ARGUMENT     INVALID_ARGUMENT
    │   └── SpecError            names op, argument, value       SPEC_ERROR
    │       └── NotSupported       what DALI has and Conveyor not  NOT_SUPPORTED
    ├── NotFound               NOT_FOUND            NOT_FOUND
    ├── AlreadyExists          ALREADY_EXISTS       ALREADY_EXISTS (holder)
    ├── FailedPrecondition     FAILED_PRECONDITION  FAILED_PRECONDITION
    │   ├── CheckpointMismatch   another pipeline, data set or engine
    │   │   ├── SpecMismatch       the spec differs              SPEC_MISMATCH
    │   │   ├── DataChanged        the data set changed          DATA_CHANGED
    │   │   └── EngineMismatch     other bytes on this server    ENGINE_MISMATCH
    │   ├── CheckpointingDisabled                                CHECKPOINTING_DISABLED
    │   ├── Fenced               another server holds it         FENCED (holder)
    │   └── DeviceUnavailable    no CUDA for a GPU operator      DEVICE_UNAVAILABLE
    ├── Aborted                ABORTED              TAKEN_OVER: a newer consumer
    ├── DataLoss               DATA_LOSS            DATA_LOSS
    │   ├── CorruptCheckpoint    checksum, truncation, decoding  CORRUPT_CHECKPOINT
    │   ├── DataFileError        an unreadable data file         DATA_FILE
    │   └── ExternalSourceError  an external source raised       EXTERNAL_SOURCE (source)
    ├── Unavailable            UNAVAILABLE          UNAVAILABLE
    │   └── Draining             the server is shutting down     DRAINING (checkpoint_id,
    │                                                                      checkpoint_batches)
    ├── PermissionDenied       PERMISSION_DENIED    PERMISSION_DENIED
    ├── ResourceExhausted      RESOURCE_EXHAUSTED   RESOURCE_EXHAUSTED
    ├── Unauthenticated        UNAUTHENTICATED      UNAUTHENTICATED
    └── Internal               INTERNAL             INTERNAL: a bug, please report it
"""

from __future__ import annotations

from typing import ClassVar

#: The ``domain`` of Conveyor's ``google.rpc.ErrorInfo`` details.
DOMAIN = "conveyor"


class ConveyorError(Exception):
    """Base of every error Conveyor raises on purpose."""

    #: Name of the gRPC status code this error maps to.
    code: str = "UNKNOWN"
    #: The machine-readable reason (``ErrorInfo.reason``): one per class.
    reason: ClassVar[str] = "UNKNOWN"

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        #: Machine-readable facts about the error (``ErrorInfo.metadata``).
        self.metadata: dict[str, str] = dict(metadata)


class InvalidArgument(ConveyorError):
    code = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"


class SpecError(InvalidArgument):
    """An operator argument is wrong; the message names op, argument, value and what is allowed."""

    reason = "SPEC_ERROR"

    def __init__(self, op: str, argument: str | None, message: str) -> None:
        where = f"{op}: argument '{argument}'" if argument else op
        super().__init__(f"{where}: {message}", op=op, argument=argument or "")
        self.op = op
        self.argument = argument


class NotSupported(SpecError, AttributeError):
    """An operator, reader, argument, pipeline argument or constant that DALI has and
    Conveyor does not; the message says so, names what is close or what is supported, and
    the page listing it. An ``AttributeError`` too, so ``hasattr(fn, "name")`` and DALI-style
    feature probing see it as absent."""

    reason = "NOT_SUPPORTED"


class NotFound(ConveyorError):
    code = "NOT_FOUND"
    reason = "NOT_FOUND"


class AlreadyExists(ConveyorError):
    code = "ALREADY_EXISTS"
    reason = "ALREADY_EXISTS"


class FailedPrecondition(ConveyorError):
    code = "FAILED_PRECONDITION"
    reason = "FAILED_PRECONDITION"


class CheckpointMismatch(FailedPrecondition):
    """The checkpoint was made by a different pipeline, data set or engine."""

    reason = "CHECKPOINT_MISMATCH"


class SpecMismatch(CheckpointMismatch):
    reason = "SPEC_MISMATCH"


class DataChanged(CheckpointMismatch):
    reason = "DATA_CHANGED"


class EngineMismatch(CheckpointMismatch):
    """This server would compute other bytes for an operator the pipeline uses."""

    reason = "ENGINE_MISMATCH"


class CheckpointingDisabled(FailedPrecondition):
    reason = "CHECKPOINTING_DISABLED"


class Fenced(FailedPrecondition):
    reason = "FENCED"


class DeviceUnavailable(FailedPrecondition):
    reason = "DEVICE_UNAVAILABLE"


class Aborted(ConveyorError):
    """This stream was taken over by a newer consumer of the same pipeline (a trainer that
    reconnected); the newer one goes on from its own position."""

    code = "ABORTED"
    reason = "TAKEN_OVER"


class DataLoss(ConveyorError):
    code = "DATA_LOSS"
    reason = "DATA_LOSS"


class CorruptCheckpoint(DataLoss):
    reason = "CORRUPT_CHECKPOINT"


class DataFileError(DataLoss):
    """A data file could not be read or decoded; the message names the file."""

    reason = "DATA_FILE"


class ExternalSourceError(DataLoss):
    """An external source raised (anything but ``StopIteration``) or returned what cannot be
    a batch; the message and ``metadata["source"]`` name it."""

    reason = "EXTERNAL_SOURCE"


class Unavailable(ConveyorError):
    code = "UNAVAILABLE"
    reason = "UNAVAILABLE"


class Draining(Unavailable):
    """The server is shutting down; ``metadata`` names the checkpoint it wrote at the
    consumer's acknowledged position (``checkpoint_id``, ``checkpoint_batches``)."""

    reason = "DRAINING"


class PermissionDenied(ConveyorError):
    code = "PERMISSION_DENIED"
    reason = "PERMISSION_DENIED"


class ResourceExhausted(ConveyorError):
    code = "RESOURCE_EXHAUSTED"
    reason = "RESOURCE_EXHAUSTED"


class Unauthenticated(ConveyorError):
    code = "UNAUTHENTICATED"
    reason = "UNAUTHENTICATED"


class Internal(ConveyorError):
    code = "INTERNAL"
    reason = "INTERNAL"


#: The class the client raises for each status code (when a reply carries no reason).
BY_CODE: dict[str, type[ConveyorError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Aborted,
        DataLoss,
        Unavailable,
        PermissionDenied,
        ResourceExhausted,
        Unauthenticated,
        Internal,
    )
}


def _tree(cls: type[ConveyorError]) -> list[type[ConveyorError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _tree(sub))]


#: The class the client raises for each reason: the exact subclass.
BY_REASON: dict[str, type[ConveyorError]] = {cls.reason: cls for cls in _tree(ConveyorError)
                                             if cls is not ConveyorError}
