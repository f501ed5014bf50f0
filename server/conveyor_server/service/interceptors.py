"""Server interceptors for what every RPC of the Conveyor service shares.

- ``RpcMetrics``: counts each call by method and final status code (``CANCELLED`` for a
  stream the client went away from).
- ``BearerAuth``: refuses a call without ``authorization: Bearer TOKEN`` with
  UNAUTHENTICATED, before the handler runs (the token is compared in constant time).

Both leave other services alone: the health service must answer probes without a token,
and reflection describes the API only.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from conveyor.channel import AUTHORIZATION_KEY, SERVICE_NAME, bearer
from conveyor_server.service.observer import ServiceObserver
from conveyor_server.service.rpc_kinds import Behaviour, rewrap

_PREFIX = f"/{SERVICE_NAME}/"
Continuation = Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None]


def _conveyor_method(details: grpc.HandlerCallDetails) -> str | None:
    """The method's name if the call is to the Conveyor service."""
    path: str = details.method
    return path[len(_PREFIX):] if path.startswith(_PREFIX) else None


class RpcMetrics(grpc.ServerInterceptor):
    def __init__(self, observer: ServiceObserver) -> None:
        self._observer = observer

    def intercept_service(self, continuation: Continuation,
                          details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        method = _conveyor_method(details)
        if handler is None or method is None:
            return handler
        return rewrap(handler, lambda behaviour, streaming: self._counted(
            behaviour, method, streaming))

    def _counted(self, behaviour: Behaviour, method: str, streaming: bool) -> Behaviour:
        finished = self._observer.rpc_finished
        if streaming:
            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                code = grpc.StatusCode.OK
                try:
                    yield from behaviour(request, context)
                    if not context.is_active():
                        code = grpc.StatusCode.CANCELLED
                except GeneratorExit:  # gRPC dropped the stream: the client went away
                    code = grpc.StatusCode.CANCELLED
                    raise
                except Exception:
                    code = context.code() or grpc.StatusCode.INTERNAL
                    raise
                finally:
                    finished(method, code.name)
            return stream

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                reply = behaviour(request, context)
            except Exception:
                finished(method, (context.code() or grpc.StatusCode.INTERNAL).name)
                raise
            finished(method, grpc.StatusCode.OK.name)
            return reply
        return call


class BearerAuth(grpc.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = bearer(token).encode()

    def intercept_service(self, continuation: Continuation,
                          details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if _conveyor_method(details) is None:
            return continuation(details)
        metadata = details.invocation_metadata
        given = dict(metadata or ()).get(AUTHORIZATION_KEY, "")
        if hmac.compare_digest(str(given).encode(), self._expected):
            return continuation(details)
        handler = continuation(details)
        return None if handler is None else rewrap(handler, lambda behaviour, _: _deny)


def _deny(request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNAUTHENTICATED,
                  "missing or wrong token: pass the server's token (Client(..., token=...) "
                  "or CONVEYOR_TOKEN)")
