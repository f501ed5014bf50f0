"""The one place where domain errors become gRPC status codes.

Deep code raises the exceptions of ``conveyor.errors``; each carries its status code's name
and a message. ``mapped`` wraps an RPC's behaviour so that such an error ends the call with
that code and message, plus the trailing metadata the error carries (a drain's
checkpoint); anything else ends it with INTERNAL, naming the exception, and is logged.
Registration applies it to every RPC of the service.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc

from conveyor.errors import ConveyorError
from conveyor_server.service.rpc_kinds import Behaviour

log = logging.getLogger("conveyor.server")


def status_of(exc: ConveyorError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN)


def abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    """End the call for ``exc`` (``context.abort`` raises)."""
    if isinstance(exc, ConveyorError):
        trailing = getattr(exc, "trailing_metadata", None)
        if trailing:
            context.set_trailing_metadata(trailing)
        context.abort(status_of(exc), exc.message)
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
