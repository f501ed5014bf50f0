"""One gRPC channel to one Conveyor server, and the errors that come back on it.

A ``Connection`` makes unary calls and opens batch streams with the project's channel
options and keepalive, over TLS when the client has ``TlsOptions`` (``credentials.py``);
a failed call is raised as the ``conveyor.errors`` class the server
named in its ``ErrorInfo`` (else the one of its status code), with its metadata.
``addresses`` turns the client's targets into server addresses: a DNS name that resolves
to several (a headless Service) gives each of them.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from conveyor import errors
from conveyor.channel import (
    CHANNEL_OPTIONS,
    CHECKPOINT_BATCHES_KEY,
    CHECKPOINT_ID_KEY,
    STREAM_BATCHES_PATH,
    client_keepalive,
    host_port,
)
from conveyor.credentials import TlsOptions, open_channel
from conveyor.v1 import service_pb2, service_pb2_grpc

Metadata = tuple[tuple[str, str], ...]


class Connection:
    def __init__(self, address: str, metadata: Metadata, keepalive: tuple[float, float],
                 tls: TlsOptions | None = None, targets: Sequence[str] = ()) -> None:
        """``targets``: the client's targets, whose first names the certificate of a
        server reached by IP (see ``credentials.expected_name``)."""
        self.address = address
        self._metadata = metadata
        self._channel = open_channel(address, tls, (*CHANNEL_OPTIONS,
                                                    *client_keepalive(*keepalive)), targets)
        self._stub = service_pb2_grpc.ConveyorStub(self._channel)
        # Batch frames stay encoded: BatchAssembler copies their data straight into place.
        self._stream_frames = self._channel.stream_stream(
            STREAM_BATCHES_PATH,
            request_serializer=service_pb2.StreamBatchesRequest.SerializeToString,
            response_deserializer=None)

    def call(self, method: str, request: Any, timeout: float) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=timeout,
                                               metadata=self._metadata)
        except grpc.RpcError as exc:
            raise error_of(exc) from None

    def stream(self, requests: Iterator[service_pb2.StreamBatchesRequest],
               timeout: float | None) -> Any:
        """The frames of a StreamBatches call (an iterator that can be cancelled)."""
        return self._stream_frames(requests, timeout=timeout, metadata=self._metadata)

    def close(self) -> None:
        self._channel.close()


def _error_info(exc: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The reason and metadata of the call's ``ErrorInfo`` detail ("" and {} if none)."""
    try:
        status = rpc_status.from_call(exc)
    except ValueError:  # details that do not match the code and message
        return "", {}
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == errors.DOMAIN:
            return info.reason, dict(info.metadata)
    return "", {}


def error_of(exc: grpc.RpcError) -> errors.ConveyorError:
    """The ``conveyor.errors`` class the server raised (by the reason it sent, else by the
    status code), with its message and metadata."""
    code = exc.code().name if exc.code() is not None else "UNKNOWN"
    reason, metadata = _error_info(exc)
    cls = errors.BY_REASON.get(reason) or errors.BY_CODE.get(code, errors.ConveyorError)
    err = cls.__new__(cls)
    errors.ConveyorError.__init__(err, exc.details() or code, **metadata)
    if isinstance(err, errors.SpecError):
        err.op, err.argument = metadata.get("op", ""), metadata.get("argument") or None
    err.code = code
    trailing = {k: v for k, v in exc.trailing_metadata() or () if isinstance(v, str)}
    err.checkpoint_id = trailing.get(CHECKPOINT_ID_KEY)  # type: ignore[attr-defined]
    batches = trailing.get(CHECKPOINT_BATCHES_KEY)
    err.checkpoint_batches = int(batches) if batches else None  # type: ignore[attr-defined]
    return err


def addresses(targets: Sequence[str]) -> list[str]:
    """Every server address the targets name, in order, without repeats: a host name that
    resolves to several addresses gives each (``"ip:port"``); one that does not resolve is
    kept as it is (gRPC will say why it cannot connect)."""
    found: list[str] = []
    for target in targets:
        host, port = host_port(target, "target")
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            infos = []
        ips = sorted({str(info[4][0]) for info in infos})
        resolved = [target] if len(ips) <= 1 else [
            f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in ips]
        found += [a for a in resolved if a not in found]
    return found
