"""The four kinds of gRPC method, and how a servicer declares which one it implements.

A kind is read from the service's descriptor (``kind_of``) or from a method handler
(``handler_kind``). Servicer methods declare theirs with a marker (``@unary``,
``@server_streaming``, ``@client_streaming``, ``@bidi_streaming``) that registration
checks against the descriptor. ``method_handler`` builds a handler of a kind, and
``rewrap`` builds one whose behaviour wraps another handler's (for interceptors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.descriptor import MethodDescriptor

UNARY = "unary"
SERVER_STREAMING = "server streaming"
CLIENT_STREAMING = "client streaming"
BIDI_STREAMING = "bidi streaming"

#: (request streaming, response streaming) -> kind.
_KINDS = {(False, False): UNARY, (False, True): SERVER_STREAMING,
          (True, False): CLIENT_STREAMING, (True, True): BIDI_STREAMING}
_FACTORIES: dict[str, Callable[..., grpc.RpcMethodHandler]] = {
    UNARY: grpc.unary_unary_rpc_method_handler,
    SERVER_STREAMING: grpc.unary_stream_rpc_method_handler,
    CLIENT_STREAMING: grpc.stream_unary_rpc_method_handler,
    BIDI_STREAMING: grpc.stream_stream_rpc_method_handler,
}
_MARK = "__rpc_kind__"

Behaviour = Callable[..., Any]
F = TypeVar("F", bound=Behaviour)


def kind_of(method: MethodDescriptor) -> str:
    return _KINDS[(method.client_streaming, method.server_streaming)]


def handler_kind(handler: grpc.RpcMethodHandler) -> str:
    return _KINDS[(handler.request_streaming, handler.response_streaming)]


def _marker(kind: str) -> Callable[[F], F]:
    def mark(method: F) -> F:
        setattr(method, _MARK, kind)
        return method
    return mark


unary = _marker(UNARY)
server_streaming = _marker(SERVER_STREAMING)
client_streaming = _marker(CLIENT_STREAMING)
bidi_streaming = _marker(BIDI_STREAMING)


def declared_kind(behaviour: object) -> str | None:
    """The kind a servicer method was marked with, or None."""
    kind = getattr(behaviour, _MARK, None)
    return kind if isinstance(kind, str) else None


def method_handler(kind: str, behaviour: Behaviour, request_deserializer: Any,
                   response_serializer: Any) -> grpc.RpcMethodHandler:
    return _FACTORIES[kind](behaviour, request_deserializer=request_deserializer,
                            response_serializer=response_serializer)


def behaviour_of(handler: grpc.RpcMethodHandler) -> Behaviour:
    behaviour = (handler.unary_unary or handler.unary_stream or handler.stream_unary
                 or handler.stream_stream)
    assert behaviour is not None, "a method handler without a behaviour"
    return behaviour


def rewrap(handler: grpc.RpcMethodHandler,
           wrap: Callable[[Behaviour, bool], Behaviour]) -> grpc.RpcMethodHandler:
    """A handler of the same kind and (de)serializers whose behaviour is
    ``wrap(behaviour, response_streaming)``."""
    return method_handler(handler_kind(handler),
                          wrap(behaviour_of(handler), handler.response_streaming),
                          handler.request_deserializer, handler.response_serializer)
