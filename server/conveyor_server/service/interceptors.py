"""Server interceptors for what every RPC of the Conveyor service shares.

- ``RpcMetrics``: counts each call by method and final status code (``CANCELLED`` for a
  stream the client went away from).
- ``Authentication``: identifies the caller (``identity.py``: a token compared in
  constant time, a client certificate, or a loopback peer) before the request is even
  parsed, and refuses one it cannot identify with UNAUTHENTICATED. The handler receives
  the request's bytes and parses them only then, so an unauthenticated peer never reaches
  the protobuf parser.

- ``ServerName``: sends the server's advertised address as the initial metadata of every
  call of an identified caller (``SERVER_NAME_KEY``): a client that reached the server at
  another address (an IP, a Service's name) matches the fleet's records and a pipeline's
  holder to the address it uses.

All three leave other services alone: the health service must answer probes without
credentials, and reflection (when switched on) describes the API only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

from conveyor.errors import ConveyorError
from conveyor.transport.channel import SERVER_NAME_KEY, SERVICE_NAME
from conveyor_server.service import status
from conveyor_server.service.identity import Authenticator
from conveyor_server.service.observer import ServiceObserver
from conveyor_server.service.rpc_kinds import (
    Behaviour,
    behaviour_of,
    handler_kind,
    method_handler,
    rewrap,
)

_PREFIX = f"/{SERVICE_NAME}/"
Continuation = Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None]


def _conveyor_method(details: grpc.HandlerCallDetails) -> str | None:
    """The method's name if the call is to the Conveyor service."""
    path: str = details.method
    return path[len(_PREFIX):] if path.startswith(_PREFIX) else None


class _PerMethod(grpc.ServerInterceptor):
    """Wraps each Conveyor method's handler once. A method's handler never changes, so
    the wrapped one is kept: a call then costs a dictionary lookup here rather than new
    closures and handler objects (per-call work stays inside the wrapped behaviour)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def intercept_service(self, continuation: Continuation,
                          details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        kept = self._wrapped.get(details.method)
        if kept is not None:
            return kept
        handler = continuation(details)
        method = _conveyor_method(details)
        if handler is None or method is None:
            return handler
        wrapped = self._wrap(handler, method)
        self._wrapped[details.method] = wrapped
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        raise NotImplementedError


class RpcMetrics(_PerMethod):
    def __init__(self, observer: ServiceObserver) -> None:
        super().__init__()
        self._observer = observer

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
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


class Authentication(_PerMethod):
    def __init__(self, authenticator: Authenticator) -> None:
        super().__init__()
        self._authenticator = authenticator

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """``handler`` with the caller identified first. Its request is still bytes here
        (``registration.py`` parses it inside the handler), so an unidentified peer never
        reaches the protobuf parser."""
        behaviour = behaviour_of(handler)
        identify = self._authenticator.identify

        def start(request: Any, context: grpc.ServicerContext) -> Any:
            """The request, once the caller is identified; the call ends here otherwise."""
            try:
                identify(context)
            except ConveyorError as exc:
                status.abort(context, exc, method)  # raises: the call ends here
                raise
            return request

        if handler.response_streaming:
            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                yield from behaviour(start(request, context), context)
            checked: Behaviour = stream
        else:
            def call(request: Any, context: grpc.ServicerContext) -> Any:
                return behaviour(start(request, context), context)
            checked = call
        return method_handler(handler_kind(handler), checked, None,
                              handler.response_serializer)


class ServerName(_PerMethod):
    def __init__(self) -> None:
        super().__init__()
        #: The advertised address ("host:port"), known once the server is bound; until
        #: then (never while it serves) nothing is sent.
        self.address = ""

    def _wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        return rewrap(handler, self._named)

    def _named(self, behaviour: Behaviour, streaming: bool) -> Behaviour:
        def send_name(context: grpc.ServicerContext) -> None:
            if self.address:
                context.send_initial_metadata(((SERVER_NAME_KEY, self.address),))

        if streaming:
            def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                send_name(context)
                yield from behaviour(request, context)
            return stream

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            send_name(context)
            return behaviour(request, context)
        return call
