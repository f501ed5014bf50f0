"""``conveyor-server``: the command line of the server.

Settings come from ``--config FILE`` (YAML, see ``config.py``), ``CONVEYOR_*`` environment
variables and the flags below, later ones winning. Secrets never come from flags: tokens
are read from files (``auth.tokens_file``), as are TLS keys. The engine and the service
(and with them OpenCV) are imported once the configuration is read, after OpenCV's pixel
cap is set from it (``decoder_caps.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from conveyor.errors import ConveyorError, FailedPrecondition, InvalidArgument, Unavailable
from conveyor.transport.allocator import AllocatorSettings, tune_malloc
from conveyor.transport.channel import host_port
from conveyor_server.app import config as configuration
from conveyor_server.app import config_loading
from conveyor_server.app.decoder_caps import cap_decoders
from conveyor_server.app.logs import FORMATS, configure_logging
from conveyor_server.app.object_storage import object_store_settings
from conveyor_server.app.security import (
    StartupCalls,
    build_security,
    check_security,
)
from conveyor_server.app.startup import load_spec, start_pipelines
from conveyor_server.engine.admission.limits import EngineLimits, SpecBounds
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.data.object_urls import is_object_url, parse_object_url
from conveyor_server.engine.stages.source_callables import ExternalSources
from conveyor_server.service.data_port import DataPortSettings
from conveyor_server.service.kill_points import KillPoints
from conveyor_server.store.connect import connect
from conveyor_server.store.owner_lock import DirectoryInUse
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store

if TYPE_CHECKING:
    from conveyor_server.app.metrics import MetricsServer

log = logging.getLogger("conveyor.server")

#: Flag destination -> configuration key it overrides.
FLAG_KEYS = {
    "listen": "listen", "advertise": "advertise", "redis_url": "redis.url",
    "state_dir": "state_dir", "data_root": "data_roots",
    "keep_checkpoints": "checkpoints.keep", "max_pipelines": "limits.max_pipelines",
    "max_streams": "limits.max_streams",
    "redis_timeout": "redis.timeout_s", "grace": "drain.grace_s",
    "log_level": "log.level", "log_format": "log.format", "metrics_listen": "metrics.listen",
    "tls_cert": "tls.cert_file", "tls_key": "tls.key_file",
    "tls_client_ca": "tls.client_ca_file", "tokens_file": "auth.tokens_file",
    "health_listen": "health.listen", "reflection": "reflection",
    "data_port": "data_channel.port", "no_data_channel": "data_channel.enabled",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="conveyor-server",
        description="Serve deterministic, checkpointable data pipelines over gRPC. Settings "
                    "come from --config, then CONVEYOR_* environment variables (one per "
                    "key, e.g. CONVEYOR_REDIS_URL), then these flags.")
    p.add_argument("--config", default=os.environ.get("CONVEYOR_CONFIG"), metavar="FILE",
                   help="YAML configuration file (env CONVEYOR_CONFIG)")
    p.add_argument("--listen", help="host:port to listen on (default 0.0.0.0:50051)")
    p.add_argument("--host", help="host to listen on (overrides the host of --listen)")
    p.add_argument("--port", type=int,
                   help="port to listen on; 0 picks a free one and prints it")
    p.add_argument("--advertise", help="host:port other servers and clients see for this one "
                                       "(default: hostname:port)")
    p.add_argument("--redis-url", help="shared Redis, e.g. redis://10.0.0.2:6379/0; without "
                                       "one the server starts a private redis-server")
    p.add_argument("--state-dir", help="where the private Redis keeps its append-only file "
                                       "(default .conveyor)")
    p.add_argument("--data-root", action="append", metavar="DIR|s3://BUCKET[/PREFIX]|gs://...|az://...",
                   help="directory or object storage prefix pipelines may read (repeatable); "
                        "paths outside are refused")
    p.add_argument("--keep-checkpoints", type=int, help="checkpoints kept per pipeline")
    p.add_argument("--max-pipelines", type=int, help="pipelines this server hosts")
    p.add_argument("--max-streams", type=int, help="consumer streams served at once")
    p.add_argument("--redis-timeout", type=float, help="timeout of every Redis call (s)")
    p.add_argument("--grace", type=float, help="seconds a SIGTERM drain waits for streams")
    p.add_argument("--tls-cert", metavar="FILE",
                   help="serve TLS with this certificate chain (PEM; read again on change)")
    p.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
    p.add_argument("--tls-client-ca", metavar="FILE",
                   help="require client certificates signed by this CA (mTLS)")
    p.add_argument("--tokens-file", metavar="FILE",
                   help="YAML file of 'name: token' entries clients authenticate with")
    p.add_argument("--health-listen", metavar="HOST:PORT",
                   help="also serve the health service alone, in plaintext, here")
    p.add_argument("--data-port", type=int, metavar="PORT",
                   help="the data port, where batch bytes travel outside gRPC's messages "
                        "(on the host of --listen; default 0: a free one)")
    p.add_argument("--no-data-channel", action="store_const", const=False,
                   help="serve no data port: batch bytes go in gRPC frames only")
    p.add_argument("--reflection", action="store_const", const=True,
                   help="serve gRPC server reflection (off by default)")
    p.add_argument("--log-level", type=str.lower, help="debug, info, warning or error")
    p.add_argument("--log-format", choices=FORMATS,
                   help="log lines on stderr as text or one JSON object per line")
    p.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve Prometheus metrics over HTTP here (port 0: a free one)")
    return p.parse_args(argv)


def overrides_from(args: argparse.Namespace) -> dict[str, Any]:
    out = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()
           if getattr(args, dest) is not None}
    if "data_roots" in out:
        out["data_roots"] = tuple(out["data_roots"])
    return out


def load_config(argv: list[str] | None = None,
                env: Mapping[str, str] | None = None) -> configuration.ServerConfig:
    args = parse_args(argv)
    cfg = config_loading.load(args.config, os.environ if env is None else env,
                              overrides_from(args))
    if args.host is not None or args.port is not None:
        # --host / --port replace a part of whatever listen address the sources gave.
        host, _, port = cfg.listen.rpartition(":")
        cfg = dataclasses.replace(cfg, listen=f"{args.host if args.host is not None else host}"
                                  f":{args.port if args.port is not None else port}")
    check_config(cfg)
    return cfg


def check_config(cfg: configuration.ServerConfig) -> None:
    """What the types alone do not say: refused here, with the key's path."""
    err = configuration.ConfigError
    if not cfg.data_roots:
        raise err("data_roots: at least one directory or object storage prefix (s3://BUCKET"
                  "[/PREFIX], gs://BUCKET[/PREFIX], az://CONTAINER[/PREFIX]) is required "
                  "(--data-root DIR)")
    for i, root in enumerate(cfg.data_roots):
        if is_object_url(root):
            try:
                parse_object_url(root, f"data_roots[{i}]")
            except InvalidArgument as exc:
                raise err(exc.message) from None
        elif not Path(root).is_dir():
            raise err(f"data_roots[{i}]: {root!r} is not a directory")
    object_store_settings(cfg.object_storage)
    addresses = {"listen": cfg.listen, "metrics.listen": cfg.metrics.listen,
                 "advertise": cfg.advertise, "health.listen": cfg.health.listen}
    for key, value in addresses.items():
        if value is not None:
            try:
                host_port(value, key)
            except InvalidArgument as exc:
                raise err(exc.message) from None
    check_security(cfg)


def spec_bounds(limits: configuration.LimitsConfig) -> SpecBounds:
    return SpecBounds(max_batch_size=limits.max_batch_size, max_threads=limits.max_threads,
                      max_prefetch_depth=limits.max_prefetch_depth, max_ops=limits.max_ops,
                      max_spec_bytes=limits.max_spec_bytes)


def data_port_settings(cfg: configuration.ServerConfig) -> DataPortSettings | None:
    """Where the data port listens (the host of ``listen``), None when it is off."""
    data = cfg.data_channel
    if not data.enabled:
        return None
    host = cfg.listen.rpartition(":")[0].strip("[]") or "0.0.0.0"
    return DataPortSettings(host=host, port=data.port, max_pending=data.max_pending,
                            max_handshakes=data.max_handshakes, handshake_s=data.handshake_s)


def start_private_redis(state_dir: Path) -> RedisProcess:
    """The redis-server of this server alone, in ``state_dir/redis``: it ends with this
    process, and one server at a time runs it there (``store/redis_process.py``)."""
    try:
        return RedisProcess(state_dir / "redis", appendonly=True).start()
    except DirectoryInUse as exc:
        holder = f"process (pid {exc.holder_pid})" if exc.holder_pid else "process"
        raise FailedPrecondition(
            f"state_dir: {state_dir.resolve()} holds the private Redis of another {holder}, "
            "which still runs: stop that conveyor-server, give this one its own "
            "--state-dir, or run both against one shared Redis with --redis-url") from None


def redis_hint(message: str) -> str:
    """``message`` (Redis did not answer at start: it names the URL) with what to
    check."""
    return (f"{message}. Check the URL's host, port, database and password, that a "
            "redis-server runs there and this machine reaches it (`redis-cli -u URL ping`), "
            "and where the URL comes from (--redis-url, CONVEYOR_REDIS_URL or redis.url in "
            "the config file); or leave it out and this server starts a private Redis of "
            "its own (then only this server can resume its pipelines)")


def main(argv: list[str] | None = None) -> int:
    embedded: RedisProcess | None = None
    metrics_http: MetricsServer | None = None
    health_only: grpc.Server | None = None
    try:
        cfg = load_config(argv)
        configure_logging(cfg.log.level, cfg.log.format)
        cap_decoders(cfg.limits.max_image_pixels)  # before OpenCV loads, with these:
        from conveyor_server.app.metrics import Metrics, serve_metrics
        from conveyor_server.engine.data.batch_read import READER as FILE_READER
        from conveyor_server.engine.identity.behaviour.measure import measure
        from conveyor_server.engine.ops.decode.batch_headers import WALK as HEADER_WALK
        from conveyor_server.engine.ops.geometry.area_resize import KERNEL as AREA_KERNEL
        from conveyor_server.service.lifecycle import Runtime
        from conveyor_server.service.server import create_server, serve_health

        for i, root in enumerate(cfg.data_roots):  # errors to clients name <root i>
            log.info("data root %d: %s (errors name its files <root %d>/...)",
                     i, root if is_object_url(root) else os.path.realpath(root), i)
        if cfg.allocator.tune:
            tune_malloc(AllocatorSettings(cfg.allocator.mmap_threshold_bytes,
                                          cfg.allocator.trim_threshold_bytes))
        specs = [load_spec(entry, i) for i, entry in enumerate(cfg.pipelines)]
        sources = ExternalSources.configured(cfg.external_sources)
        if sources.names:
            log.info("external sources pipelines may name: %s", ", ".join(sources.names))
        security = build_security(cfg)
        security.log_summary(cfg.listen)
        url = cfg.redis.url
        if not url and cfg.redis.mode == "standalone":
            embedded = start_private_redis(Path(cfg.state_dir))
            url = embedded.url
            log.info("no redis.url given: started a private redis-server at %s with "
                     "append-only persistence in %s (point several servers at one shared "
                     "Redis for multi-node restore)", url, embedded.directory)
        store = Store(connect(cfg.redis, url), timeout=cfg.redis.timeout_s,
                      min_replicas=cfg.redis.min_replicas,
                      replica_timeout=cfg.redis.replica_timeout_s, lease=cfg.redis.lease_s,
                      failover=cfg.redis.failover_s)
        try:
            store.ping()
        except Unavailable as exc:
            raise Unavailable(redis_hint(exc.message)) from None
        limits = EngineLimits(max_batch_bytes=cfg.limits.max_batch_bytes,
                              max_image_pixels=cfg.limits.max_image_pixels,
                              max_file_bytes=cfg.limits.max_file_bytes,
                              max_extent=cfg.limits.max_extent,
                              spec=spec_bounds(cfg.limits))
        behaviour = measure()
        log.info("measured this server's behaviour: %d operator paths in %.0f ms (%s); area "
                 "resize: %s; image headers: %s; a batch's files read by: %s",
                 len(behaviour.digests), behaviour.seconds * 1000, behaviour.cpu, AREA_KERNEL,
                 HEADER_WALK, FILE_READER)
        metrics = Metrics(behaviour)
        server, port, service, health_servicer = create_server(
            cfg.listen, store, cfg.data_roots, observer=metrics, advertise=cfg.advertise,
            keep_checkpoints=cfg.checkpoints.keep, max_pipelines=cfg.limits.max_pipelines,
            max_streams=cfg.limits.max_streams, first_message_s=cfg.limits.first_message_s,
            authenticator=security.authenticator, credentials=security.credentials,
            reflection=cfg.reflection, drain_wait=cfg.drain.grace_s / 2, limits=limits,
            behaviour=behaviour, keepalive=(cfg.keepalive.time_s, cfg.keepalive.timeout_s),
            worker_threads=cfg.limits.worker_threads, kill_points=KillPoints(cfg.faults.kill_at),
            external_sources=sources, data_port=data_port_settings(cfg),
            objects=ObjectStores(object_store_settings(cfg.object_storage),
                                 metrics.object_storage),
            certificates=security.certificates)
        metrics.watch_service(service)
        startup = StartupCalls(security.authenticator)
        if cfg.pipelines:
            startup.bind(server)
        if cfg.metrics.listen is not None:
            metrics_http = serve_metrics(cfg.metrics.listen, metrics)
        runtime = Runtime(server, service, health_servicer,
                          idle_release_s=cfg.limits.idle_release_s)
        runtime.start(serving=not cfg.pipelines)
        if cfg.health.listen is not None:  # after start: it says NOT_SERVING until ready
            try:
                health_only, health_port = serve_health(cfg.health.listen, health_servicer)
            except BaseException:
                runtime.stop()
                raise
        runtime.install_signal_handlers(cfg.drain.grace_s)
        host = cfg.listen.rpartition(":")[0]
        data_port = service.streams.data_port
        if data_port is not None:
            log.info("data channel: data port %d (%s)", data_port.port,
                     "TLS" if security.certificates is not None else "plaintext")
        # Lines on stdout that tools can parse; everything else goes to the log.
        print(f"conveyor-server listening on {host}:{port} as {service.address} "
              f"(redis {store.address})", flush=True)
        if metrics_http is not None and cfg.metrics.listen is not None:
            metrics_host = cfg.metrics.listen.rpartition(":")[0]
            print(f"conveyor-server metrics on {metrics_host}:{metrics_http.port}", flush=True)
        if health_only is not None and cfg.health.listen is not None:
            health_host = cfg.health.listen.rpartition(":")[0]
            print(f"conveyor-server health on {health_host}:{health_port}", flush=True)
        if cfg.pipelines:
            try:
                with startup.clients({e.owner for e in cfg.pipelines}) as clients:
                    start_pipelines(clients, cfg.pipelines, specs)
            except BaseException:
                runtime.stop()
                raise
            runtime.set_serving()
        server.wait_for_termination()
        runtime.stopped.wait(cfg.drain.grace_s + 2)
        return 0
    except ConveyorError as exc:
        print(f"conveyor-server: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"conveyor-server: {exc}", file=sys.stderr)
        return 2
    finally:
        if health_only is not None:
            health_only.stop(0)
        if metrics_http is not None:
            metrics_http.close()
        if embedded is not None:
            embedded.stop()


if __name__ == "__main__":
    sys.exit(main())
