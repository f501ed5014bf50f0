"""``python -m conveyor_server.app.probe``: one grpc.health.v1 Check, for container health
checks.

    python -m conveyor_server.app.probe [--address 127.0.0.1:50051]
                                        [--service conveyor.v1.Conveyor] [--timeout 2]
                                        [--tls-ca FILE [--tls-cert FILE --tls-key FILE]
                                         [--tls-server-name NAME]]

Exits 0 when the service answers SERVING and 1 otherwise, printing one line that says why
(the status it answered, that the address was unreachable, that it does not know the
service, ...). A draining server (SIGTERM) answers NOT_SERVING. Kubernetes uses its native
gRPC probes instead; this is what the image's HEALTHCHECK runs. A server with TLS is
checked over TLS with ``--tls-ca`` (``CONVEYOR_TLS_CA``; a client certificate too where it
requires one), or on its plaintext health port (``health.listen``), which needs nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2

from conveyor.errors import ConveyorError
from conveyor.transport.channel import SERVICE_NAME, SERVING, health_status
from conveyor.transport.credentials import (
    TlsOptions,
    add_tls_arguments,
    open_channel,
    tls_from_args,
)

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_SERVICE = SERVICE_NAME


def check(address: str, service: str, timeout: float,
          tls: TlsOptions | None = None) -> tuple[bool, str]:
    """Ask ``address`` for the health of ``service`` ("" is the whole server), over TLS
    with ``tls``. Returns (serving, one line saying what was found)."""
    what = f"service {service!r}" if service else "the server"
    try:
        channel = open_channel(address, tls)
    except ConveyorError as exc:
        return False, f"cannot check {address}: {exc.message}"
    with channel:
        try:
            answer = health_status(channel, service, timeout)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()
            details = exc.details() or "no details"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return False, (f"unreachable: no health answer from {address} within "
                               f"{timeout:g}s ({code.name}: {details})")
            if code == grpc.StatusCode.NOT_FOUND:
                return False, f"{address} does not know {what} (NOT_FOUND)"
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return False, f"{address} has no grpc.health.v1 service (UNIMPLEMENTED)"
            return False, f"health check of {what} at {address} failed: {code.name}: {details}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer)
    if answer == SERVING:
        return True, f"{what} at {address} is SERVING"
    return False, f"{what} at {address} is {status}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conveyor_server.app.probe",
                                description="gRPC health check of a Conveyor server: exit 0 "
                                            "if SERVING, 1 otherwise.")
    p.add_argument("--address", default=DEFAULT_ADDRESS,
                   help=f"host:port of the server (default {DEFAULT_ADDRESS})")
    p.add_argument("--service", default=DEFAULT_SERVICE,
                   help=f"service to check; '' for the whole server (default {DEFAULT_SERVICE})")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait (default 2)")
    add_tls_arguments(p)
    args = p.parse_args(argv)
    if args.timeout <= 0:
        p.error("--timeout must be > 0")
    try:
        tls = tls_from_args(args)
    except ConveyorError as exc:
        p.error(exc.message)
    serving, line = check(args.address, args.service, args.timeout, tls)
    print(line, file=sys.stdout if serving else sys.stderr, flush=True)
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
