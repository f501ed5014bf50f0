"""Conveyor's exception tree, in one place.

Deep code raises these; the server maps each to its gRPC status code at the servicer
boundary (the ``code`` attribute names it), and the client raises the same class back
from a failed RPC. So ``except conveyor.errors.NotFound`` works in-process and remotely.

    ConveyorError
    ├── InvalidArgument        INVALID_ARGUMENT     bad spec: names op, argument, value
    ├── NotFound               NOT_FOUND            unknown pipeline or checkpoint
    ├── AlreadyExists          ALREADY_EXISTS       pipeline name taken (names the holder)
    ├── FailedPrecondition     FAILED_PRECONDITION
    │   ├── CheckpointMismatch   spec / file list / engine differ (names the first difference)
    │   ├── CheckpointingDisabled
    │   ├── Fenced               another server restored the pipeline (names the new holder)
    │   └── DeviceUnavailable    a GPU operator asked for on a machine without CUDA
    ├── Aborted                ABORTED              a newer consumer took over the stream
    ├── DataLoss               DATA_LOSS
    │   ├── CorruptCheckpoint    checksum, truncation or decoding failure
    │   └── DataFileError        an unreadable or undecodable data file (names it)
    ├── Unavailable            UNAVAILABLE          Redis unreachable, server draining
    ├── PermissionDenied       PERMISSION_DENIED    path outside the data roots
    ├── ResourceExhausted      RESOURCE_EXHAUSTED   limits
    ├── Unauthenticated        UNAUTHENTICATED
    └── Internal               INTERNAL             a bug: please report it
"""

from __future__ import annotations


class ConveyorError(Exception):
    """Base of every error Conveyor raises on purpose."""

    #: Name of the gRPC status code this error maps to.
    code: str = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(ConveyorError):
    code = "INVALID_ARGUMENT"


class SpecError(InvalidArgument):
    """An operator argument is wrong; the message names op, argument, value and what is allowed."""

    def __init__(self, op: str, argument: str | None, message: str) -> None:
        where = f"{op}: argument '{argument}'" if argument else op
        super().__init__(f"{where}: {message}")
        self.op = op
        self.argument = argument


class NotFound(ConveyorError):
    code = "NOT_FOUND"


class AlreadyExists(ConveyorError):
    code = "ALREADY_EXISTS"


class FailedPrecondition(ConveyorError):
    code = "FAILED_PRECONDITION"


class CheckpointMismatch(FailedPrecondition):
    """The checkpoint was made by a different pipeline, data set or engine."""


class CheckpointingDisabled(FailedPrecondition):
    pass


class Fenced(FailedPrecondition):
    pass


class DeviceUnavailable(FailedPrecondition):
    pass


class Aborted(ConveyorError):
    """This stream was taken over by a newer consumer of the same pipeline (a trainer that
    reconnected); the newer one goes on from its own position."""

    code = "ABORTED"


class DataLoss(ConveyorError):
    code = "DATA_LOSS"


class CorruptCheckpoint(DataLoss):
    pass


class DataFileError(DataLoss):
    """A data file could not be read or decoded; the message names the file."""


class Unavailable(ConveyorError):
    code = "UNAVAILABLE"


class PermissionDenied(ConveyorError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(ConveyorError):
    code = "RESOURCE_EXHAUSTED"


class Unauthenticated(ConveyorError):
    code = "UNAUTHENTICATED"


class Internal(ConveyorError):
    code = "INTERNAL"


#: The class the client raises for each status code.
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
