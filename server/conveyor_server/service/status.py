"""The one place where domain errors become gRPC status codes.

Deep code raises the exceptions of ``conveyor.errors``; each carries its status code's name,
a message, a machine-readable reason and metadata. ``mapped`` wraps an RPC's behaviour so
that such an error ends the call with that code and message and a ``google.rpc.Status``
whose ``ErrorInfo`` detail holds the reason and metadata (the client raises the exact
class from it), plus the trailing metadata the error carries (a drain's checkpoint).
Anything else (and an ``Internal`` error) ends it with INTERNAL and a fresh error id: the
client reads ``internal error <id>`` (the id also in the ``ErrorInfo`` metadata,
``error_id``), and the exception's type, message and traceback go to the server's log
under that id only. Registration applies it to every RPC of the service.

Messages and metadata values are clipped to a few hundred bytes: a status travels in
HTTP/2 trailers, which clients refuse past about 8 KiB (the call would then fail with
RESOURCE_EXHAUSTED instead of its own code), and a message may quote what the client sent.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from conveyor.errors import DOMAIN, ConveyorError, Internal
from conveyor_server.service.rpc_kinds import Behaviour

log = logging.getLogger("conveyor.server")
#: The most UTF-8 bytes sent of an error's message, and of each of its metadata values.
MAX_MESSAGE_BYTES = 1024
MAX_METADATA_BYTES = 256


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
    metadata = {key: clipped(value, MAX_METADATA_BYTES) for key, value in exc.metadata.items()}
    detail.Pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=DOMAIN,
                                            metadata=metadata))
    code = status_of(exc)
    message = clipped(exc.message, MAX_MESSAGE_BYTES)
    packed = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    trailing = tuple(rpc_status.to_status(packed).trailing_metadata or ())
    return _Status(code, message, (*trailing, *getattr(exc, "trailing_metadata", ())))


def clipped(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, saying how much was left out."""
    data = text.encode()
    if len(data) <= limit:
        return text
    kept = data[:limit - 32].decode(errors="ignore")
    return f"{kept}... ({len(data) - len(kept.encode()):,} bytes more)"


def internal_error(exc: BaseException, method: str) -> Internal:
    """What the client is told of ``exc``, a bug: an error id, while the exception itself
    goes to the log under that id."""
    error_id = secrets.token_hex(8)
    log.error("%s failed: internal error %s: %s: %s", method, error_id, type(exc).__name__,
              exc, exc_info=exc, extra={"error_id": error_id, "method": method})
    return Internal(f"internal error {error_id} (the server's log has the details under "
                    "this id)", error_id=error_id)


def abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call for ``exc`` (``context.abort`` raises)."""
    if isinstance(exc, ConveyorError) and exc.code not in ("INTERNAL", "UNKNOWN"):
        context.abort_with_status(rich_status(exc))
    context.abort_with_status(rich_status(internal_error(exc, method)))


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
