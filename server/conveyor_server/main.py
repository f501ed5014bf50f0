"""``conveyor-server``: the command line of the server."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from conveyor.errors import ConveyorError
from conveyor_server.logs import FORMATS, configure_logging
from conveyor_server.metrics import Metrics, MetricsServer, serve_metrics, split_address
from conveyor_server.redis_process import RedisProcess
from conveyor_server.server import Runtime, create_server
from conveyor_server.store import Store

log = logging.getLogger("conveyor.server")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="conveyor-server",
        description="Serve deterministic, checkpointable data pipelines over gRPC.")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=50051,
                   help="port to listen on; 0 picks a free one and prints it (default 50051)")
    p.add_argument("--advertise", default=None,
                   help="host:port other servers and clients see for this one "
                        "(default: hostname:port)")
    p.add_argument("--redis-url", default=os.environ.get("CONVEYOR_REDIS_URL"),
                   help="shared Redis, e.g. redis://10.0.0.2:6379/0 (env CONVEYOR_REDIS_URL); "
                        "without it the server starts a private redis-server")
    p.add_argument("--state-dir", default=os.environ.get("CONVEYOR_STATE_DIR", ".conveyor"),
                   help="where the private Redis keeps its append-only file (default .conveyor)")
    p.add_argument("--data-root", action="append", default=[], metavar="DIR",
                   help="directory pipelines may read (repeatable); paths outside are refused")
    p.add_argument("--keep-checkpoints", type=int, default=10,
                   help="checkpoints kept per pipeline (default 10; the latest is always kept)")
    p.add_argument("--max-pipelines", type=int, default=64, help="pipelines this server hosts")
    p.add_argument("--redis-timeout", type=float, default=1.0,
                   help="timeout of every Redis call in seconds (default 1)")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds a SIGTERM drain waits for streams (default 10)")
    p.add_argument("--token", default=os.environ.get("CONVEYOR_TOKEN"),
                   help="require 'authorization: Bearer TOKEN' metadata (env CONVEYOR_TOKEN)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--log-format", choices=FORMATS,
                   default=os.environ.get("CONVEYOR_LOG_FORMAT", "text"),
                   help="log lines on stderr as text or one JSON object per line "
                        "(env CONVEYOR_LOG_FORMAT; default text)")
    p.add_argument("--metrics-listen", metavar="HOST:PORT",
                   default=os.environ.get("CONVEYOR_METRICS_LISTEN") or None,
                   help="serve Prometheus metrics at http://HOST:PORT/metrics; port 0 picks "
                        "a free one and prints it (env CONVEYOR_METRICS_LISTEN; default off)")
    args = p.parse_args(argv)
    if args.log_format not in FORMATS:
        p.error(f"--log-format must be one of {', '.join(FORMATS)}")
    if args.metrics_listen:
        try:
            split_address(args.metrics_listen)
        except ValueError as exc:
            p.error(f"--metrics-listen: {exc}")
    if not args.data_root:
        p.error("at least one --data-root is required")
    if args.keep_checkpoints < 1:
        p.error("--keep-checkpoints must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        configure_logging(args.log_level, args.log_format)
    except ValueError as exc:
        print(f"conveyor-server: {exc}", file=sys.stderr)
        return 2
    embedded: RedisProcess | None = None
    metrics_http: MetricsServer | None = None
    try:
        url = args.redis_url
        if not url:
            embedded = RedisProcess(Path(args.state_dir) / "redis", appendonly=True).start()
            url = embedded.url
            log.info("no --redis-url given: started a private redis-server at %s with "
                     "append-only persistence in %s (point several servers at one shared "
                     "Redis for multi-node restore)", url, embedded.directory)
        store = Store(url, timeout=args.redis_timeout)
        store.ping()
        for root in args.data_root:
            if not Path(root).is_dir():
                raise ConveyorError(f"--data-root {root!r} is not a directory")
        metrics = Metrics()
        server, port, service, health_servicer = create_server(
            f"{args.host}:{args.port}", store, args.data_root, advertise=args.advertise,
            keep_checkpoints=args.keep_checkpoints, max_pipelines=args.max_pipelines,
            token=args.token, drain_wait=args.grace / 2, metrics=metrics)
        if args.metrics_listen:
            metrics_http = serve_metrics(args.metrics_listen, metrics)[0]
        runtime = Runtime(server, service, health_servicer)
        runtime.start()
        runtime.install_signal_handlers(args.grace)
        # Lines on stdout that tools can parse; everything else goes to the log.
        print(f"conveyor-server listening on {args.host}:{port} as {service.address} "
              f"(redis {store.address})", flush=True)
        if metrics_http is not None:
            host = split_address(args.metrics_listen)[0]
            print(f"conveyor-server metrics on {host}:{metrics_http.port}", flush=True)
        server.wait_for_termination()
        runtime.stopped.wait(args.grace + 2)
        return 0
    except ConveyorError as exc:
        print(f"conveyor-server: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"conveyor-server: {exc}", file=sys.stderr)
        return 2
    finally:
        if metrics_http is not None:
            metrics_http.close()
        if embedded is not None:
            embedded.stop()


if __name__ == "__main__":
    sys.exit(main())
