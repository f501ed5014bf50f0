"""The one place where domain errors become gRPC status codes."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from conveyor.errors import ConveyorError, Unauthenticated

log = logging.getLogger("conveyor.server")
F = TypeVar("F", bound=Callable[..., Any])


def status_of(exc: ConveyorError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN)


def _abort(context: grpc.ServicerContext, exc: BaseException, method: str) -> None:
    if isinstance(exc, ConveyorError):
        trailing = getattr(exc, "trailing_metadata", None)
        if trailing:
            context.set_trailing_metadata(trailing)
        context.abort(status_of(exc), exc.message)
    log.exception("%s failed", method)
    context.abort(grpc.StatusCode.INTERNAL, f"{method}: internal error: {type(exc).__name__}: "
                  f"{exc}")


def _authorize(self: Any, context: grpc.ServicerContext) -> None:
    token = getattr(self, "token", None)
    if not token:
        return
    metadata = dict(context.invocation_metadata())
    if metadata.get("authorization") != f"Bearer {token}":
        raise Unauthenticated("missing or wrong token: pass the server's token "
                              "(Client(..., token=...) or CONVEYOR_TOKEN)")


def _failure_code(exc: BaseException, context: grpc.ServicerContext) -> grpc.StatusCode:
    """The status an exception ends the call with: the one already set by an abort, that of
    a domain error, or INTERNAL."""
    code = context.code()
    if code is not None:
        return code
    return status_of(exc) if isinstance(exc, ConveyorError) else grpc.StatusCode.INTERNAL


def _count(self: Any, method: str, code: grpc.StatusCode) -> None:
    metrics = getattr(self, "metrics", None)
    if metrics is not None:
        metrics.rpc(method, code.name)


def unary(method: F) -> F:
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            _authorize(self, context)
            reply = method(self, request, context)
        except Exception as exc:
            _count(self, name, _failure_code(exc, context))
            if context.code() is not None:  # already aborted
                raise
            _abort(context, exc, name)
        _count(self, name, grpc.StatusCode.OK)
        return reply
    return wrapper  # type: ignore[return-value]


def streaming(method: F) -> F:
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        code = grpc.StatusCode.OK
        try:
            _authorize(self, context)
            yield from method(self, request, context)
            if not context.is_active():
                code = grpc.StatusCode.CANCELLED
        except GeneratorExit:  # gRPC dropped the stream: the client went away
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception as exc:
            code = _failure_code(exc, context)
            if context.code() is not None:
                raise
            _abort(context, exc, name)
        finally:
            _count(self, name, code)
    return wrapper  # type: ignore[return-value]
