"""The Conveyor service's method handlers, built from the generated descriptors.

Every RPC of ``conveyor.v1.Conveyor`` must have a method of the same name on the servicer,
marked with its kind (``rpc_kinds.unary``, ...) and written accordingly (a generator for a
streaming response). Anything else stops the server before it starts, naming the RPC: a
missing handler, a kind that differs from the descriptor's, a generator for a unary
response, or a marked method the service does not have. Each behaviour gets the status
mapping of ``status.mapped``, and a unary response's behaviour runs within the caller's
deadline as the store knows it (``store.failover.caller_deadline``: a store call tried
again over a Redis failover answers before it). Streamed responses may be bytes already
encoded (the batch frames of ``conveyor.transport.wire``): they are sent as they are, without
another copy through a message.

Requests reach the behaviour as bytes and are parsed inside the status mapping: bytes
that are not the request message (garbage, a truncated message, a string field that is
not UTF-8) end the call with INVALID_ARGUMENT naming the message, where gRPC's own
deserializer would answer INTERNAL.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from conveyor.errors import InvalidArgument
from conveyor.v1 import service_pb2
from conveyor_server.service import rpc_kinds, status
from conveyor_server.store.failover import caller_deadline

CONVEYOR = service_pb2.DESCRIPTOR.services_by_name["Conveyor"]


def _encoded_or_message(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def _parsing(behaviour: rpc_kinds.Behaviour, request: type[Message],
             streaming: bool) -> rpc_kinds.Behaviour:
    """``behaviour`` taking its request (or each streamed request) as bytes: parsed here,
    ``InvalidArgument`` when they are not a ``request``."""
    name = request.DESCRIPTOR.full_name

    def parse(data: bytes) -> Message:
        try:
            return request.FromString(data)
        except DecodeError as exc:
            raise InvalidArgument(f"the request is not a valid {name} ({len(data)} bytes): "
                                  f"{exc}") from None

    if streaming:
        def each(requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
            return behaviour((parse(data) for data in requests), context)
        return each

    def one(data: bytes, context: grpc.ServicerContext) -> Any:
        return behaviour(parse(data), context)
    return one


def _within_deadline(behaviour: rpc_kinds.Behaviour) -> rpc_kinds.Behaviour:
    """A unary response's ``behaviour`` with the caller's deadline known to the store."""
    def bounded(request: Any, context: grpc.ServicerContext) -> Any:
        with caller_deadline(context.time_remaining()):
            return behaviour(request, context)
    return bounded


def service_handler(servicer: object,
                    service: ServiceDescriptor = CONVEYOR) -> grpc.GenericRpcHandler:
    """The handlers of every RPC of ``service``, served by ``servicer``'s methods."""
    cls = type(servicer).__name__
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        kind = rpc_kinds.kind_of(method)
        behaviour = getattr(servicer, method.name, None)
        if behaviour is None:
            raise TypeError(f"{cls} has no handler for {method.full_name} ({kind})")
        declared = rpc_kinds.declared_kind(behaviour)
        if declared != kind:
            raise TypeError(f"{method.full_name} is {kind} in the service's descriptor, but "
                            f"{cls}.{method.name} is declared "
                            f"{declared or 'without a kind (mark it @rpc_kinds.unary, ...)'}")
        if inspect.isgeneratorfunction(behaviour) != method.server_streaming:
            need = "a generator" if method.server_streaming else "a plain function"
            raise TypeError(f"{cls}.{method.name} must be {need}: {method.full_name} is "
                            f"{kind}")
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        serializer = (_encoded_or_message if method.server_streaming
                      else response.SerializeToString)
        parsed = _parsing(behaviour, request, method.client_streaming)
        if not method.server_streaming:
            parsed = _within_deadline(parsed)
        handlers[method.name] = rpc_kinds.method_handler(
            kind, status.mapped(parsed, method.name, method.server_streaming),
            None, serializer)
    extra = sorted(name for name in dir(type(servicer))
                   if rpc_kinds.declared_kind(getattr(type(servicer), name)) is not None
                   and name not in handlers)
    if extra:
        raise TypeError(f"{cls} marks {', '.join(extra)} as RPC handlers, but "
                        f"{service.full_name} has no such RPC")
    return grpc.method_handlers_generic_handler(service.full_name, handlers)
