"""The one place where domain errors become gRPC status codes.

Deep code raises the exceptions of ``conveyor.errors``; each carries its status code's name,
a message, a machine-readable reason and metadata. ``mapped`` wraps an RPC's behaviour so
that such an error ends the call with that code and message and a ``google.rpc.Status``
whose ``ErrorInfo`` detail holds the reason and metadata (the client raises the exact
class from it), plus the trailing metadata the error carries (a drain's checkpoint);
anything else ends it with INTERNAL, naming the exception, and is logged. Registration
applies it to every RPC of the service.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from conveyor.errors import DOMAIN, ConveyorError
from conveyor_server.service.rpc_kinds import Behaviour

log = logging.getLogger("conveyor.server")


def status_of(exc: ConveyorError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN)


@dataclass(frozen=True)
class _Status(grpc.Status):
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def rich_status(exc: ConveyorError) -> grpc.Status:
    """The status that ends a call for ``exc``: code, message, and an ``ErrorInfo`` with
    the reason and metadata, packed as ``grpc-status-details-bin``."""
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=DOMAIN,
                                            metadata=exc.metadata))
    code = status_of(exc)
    packed = status_pb2.Status(code=code.value[0], message=exc.message, details=[detail])
    trailing = tuple(rpc_status.to_status(packed).trailing_metadata or ())
    return _Status(code, exc.message, (*trailing, *getattr(exc, "trailing_metadata", ())))


def abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call for ``exc`` (``context.abort`` raises)."""
    if isinstance(exc, ConveyorError):
        context.abort_with_status(rich_status(exc))
    log.exception("%s failed", method)
    context.abort(grpc.StatusCode.INTERNAL, f"{method}: internal error: {type(exc).__name__}: "
                  f"{exc}")


def mapped(behaviour: Behaviour, method: str, response_streaming: bool) -> Behaviour:
    """``behaviour`` with its errors mapped to status codes (``method`` names it in logs)."""
    if response_streaming:
        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from behaviour(request, context)
            except Exception as exc:
                if context.code() is not None:  # already aborted
                    raise
                abort(context, exc, method)
        return stream

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return behaviour(request, context)
        except Exception as exc:
            if context.code() is not None:
                raise
            abort(context, exc, method)
    return call
