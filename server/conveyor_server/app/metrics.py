"""Prometheus metrics of one server, in a registry of its own.

``Metrics()`` holds every metric and records what the service reports through
``conveyor_server.service.observer.ServiceObserver``.
``watch_service(service)`` adds the server's load: per pipeline and per server, for
autoscaling and the dashboard (``load_metrics.py``).
``serve_metrics("HOST:PORT", metrics)`` exposes it over HTTP (``/metrics``; port 0 picks a
free one). Labels: the RPC method and status code (fixed sets), the build's fixed identity,
and the names of the pipelines hosted now (``pipeline``, at most ``limits.max_pipelines``;
a pipeline's series go when it leaves the server).

The streaming hot path costs one update of each stream counter per batch, nothing per
sample.
"""

from __future__ import annotations

import hashlib
import platform
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import start_http_server

from conveyor.transport.channel import host_port
from conveyor_server import __version__
from conveyor_server.app.load_metrics import PipelineLoad, ServerLoad
from conveyor_server.engine import keyed_random
from conveyor_server.engine.identity.behaviour.measure import Behaviour, process_behaviour
from conveyor_server.engine.identity.engine_id import OUTPUT_VERSION

if TYPE_CHECKING:
    from conveyor_server.service.handlers import ConveyorService

#: Seconds, from a fraction of a millisecond (a checkpoint of an idle pipeline) to seconds
#: (a batch of large images, a restore that lists a big data set).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                   1.0, 2.5, 5.0, 10.0, 30.0)


def behaviour_digest(behaviour: Behaviour) -> str:
    """One short digest of every behaviour key and digest: servers that show the same one
    compute the same bytes for every operator, so any of them restores any checkpoint."""
    h = hashlib.sha256()
    for key, digest in sorted(behaviour.digests.items()):
        h.update(key.encode() + b"=" + digest + b";")
    return h.hexdigest()[:16]


def engine_labels(behaviour: Behaviour) -> dict[str, str]:
    return {"behaviour": behaviour_digest(behaviour), "cpu": behaviour.cpu,
            "key_schedule": str(keyed_random.KEY_SCHEDULE),
            "output_version": str(OUTPUT_VERSION)}


class ObjectStorageMetrics:
    """What the server's object storage clients did (``ObjectStoreObserver``): no bucket,
    key or credential is a label."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            "conveyor_object_requests",
            "Requests to object storage, by kind (list, head, get, get_range) and outcome "
            "(ok, failed: each failed attempt, retried or not).", ["kind", "outcome"],
            registry=r)
        self.latency = Histogram(
            "conveyor_object_request_latency_seconds",
            "Time of one request to object storage (one attempt), by kind.", ["kind"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.bytes_fetched = Counter(
            "conveyor_object_bytes_fetched", "Bytes of objects read from object storage.",
            registry=r)
        self.retries = Counter(
            "conveyor_object_retries",
            "Requests to object storage made again after a 5xx, SlowDown, a dropped or "
            "refused connection or a timeout, by kind.", ["kind"], registry=r)
        self.cache = Counter(
            "conveyor_object_cache_lookups",
            "Whole-object reads looked up in the node cache, by result (hit, miss).",
            ["result"], registry=r)
        self.fetch_ahead = Counter(
            "conveyor_object_fetch_ahead_reads",
            "Reads of objects (whole or a byte range) by the pipelines' workers, by result: "
            "hit (requested ahead, as its batch started), miss (requested when read).",
            ["result"], registry=r)

    def request(self, kind: str, seconds: float, ok: bool) -> None:
        self.requests.labels(kind, "ok" if ok else "failed").inc()
        self.latency.labels(kind).observe(seconds)

    def fetched(self, nbytes: int) -> None:
        self.bytes_fetched.inc(nbytes)

    def retried(self, kind: str) -> None:
        self.retries.labels(kind).inc()

    def cached(self, hit: bool) -> None:
        self.cache.labels("hit" if hit else "miss").inc()

    def took(self, ahead: bool) -> None:
        self.fetch_ahead.labels("hit" if ahead else "miss").inc()


class Metrics:
    def __init__(self, behaviour: Behaviour | None = None) -> None:
        behaviour = behaviour or process_behaviour()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.batches_streamed = Counter(
            "conveyor_batches_streamed", "Batches written to consumer streams.", registry=r)
        self.samples_streamed = Counter(
            "conveyor_samples_streamed", "Samples in the batches written to consumer streams.",
            registry=r)
        self.bytes_streamed = Counter(
            "conveyor_bytes_streamed",
            "Bytes written to consumer streams: their encoded frames, or on a data channel "
            "each batch's header frame and its bytes.", registry=r)
        self.decode_errors = Counter(
            "conveyor_decode_errors",
            "Batches the engine could not produce because a data file was unreadable or "
            "undecodable (the stream ends with DATA_LOSS).", registry=r)
        self.samples_failed_total = Counter(
            "conveyor_samples_failed",
            "Samples whose file could not be read or decoded, left out of their batch "
            "(policy=skip) or replaced by the batch's next good sample (policy=replace).",
            ["policy"], registry=r)
        self.checkpoints_written = Counter(
            "conveyor_checkpoints_written", "Checkpoints stored in Redis by this server.",
            registry=r)
        self.restores = Counter(
            "conveyor_restores", "Pipelines restored on this server from a checkpoint.",
            registry=r)
        self.rpcs = Counter(
            "conveyor_rpcs", "Conveyor RPCs handled, by method and final status code.",
            ["method", "code"], registry=r)
        self.batch_latency = Histogram(
            "conveyor_batch_latency_seconds",
            "Time a stream waited for the engine's next batch.",
            buckets=LATENCY_BUCKETS, registry=r)
        self.checkpoint_latency = Histogram(
            "conveyor_checkpoint_latency_seconds",
            "Time to compute, seal and store a checkpoint in Redis.",
            buckets=LATENCY_BUCKETS, registry=r)
        self.restore_latency = Histogram(
            "conveyor_restore_latency_seconds",
            "Time of a successful Restore: reading and verifying the checkpoint, building "
            "the pipeline and taking over its name.", buckets=LATENCY_BUCKETS, registry=r)
        self.active_streams = Gauge(
            "conveyor_active_streams", "Consumer streams open now.", registry=r)
        self.hosted_pipelines = Gauge(
            "conveyor_hosted_pipelines",
            "Pipelines this server holds now (fenced ones until they are deleted or "
            "restored again).", registry=r)
        self.build = Info("conveyor_build", "The server's version and engine.", registry=r)
        self.build.info({"version": __version__, **engine_labels(behaviour),
                         "python": platform.python_version()})
        self.probe_seconds = Gauge(
            "conveyor_behaviour_probe_seconds",
            "Time the start-up behaviour probe took (every operator on the canonical probes).",
            registry=r)
        self.probe_seconds.set(behaviour.seconds)
        self.data_channels = Counter(
            "conveyor_data_channels", "Data channels attached to batch calls.", registry=r)
        self.data_channel_refusals = Counter(
            "conveyor_data_channel_refusals",
            "Connections to the data port refused, by reason: ticket (wrong, expired or "
            "used), hello (malformed or not completed in time), tls (a failed handshake), "
            "busy (too many handshakes at once).", ["reason"], registry=r)
        self.object_storage = ObjectStorageMetrics(r)
        self.pipeline_load = PipelineLoad()
        r.register(self.pipeline_load)
        self.server_load = ServerLoad()
        r.register(self.server_load)

    def watch_service(self, service: ConveyorService) -> None:
        """Export ``service``'s load: its hosted pipelines' series, its worker threads and
        how busy they are, its capacity."""
        pipelines = service.pipelines
        self.pipeline_load.watch(lambda: [hosted.name for hosted in pipelines.all()])
        self.server_load.watch(service.workers.busy_seconds, service.workers.threads,
                               pipelines.limit, service.streams.slots.max_streams)
        data_port = service.streams.data_port
        if data_port is not None:
            data_port.on_attached = self.data_channels.inc
            data_port.on_refused = lambda reason: self.data_channel_refusals.labels(
                reason).inc()

    # -- ServiceObserver ---------------------------------------------------------------

    def watch_hosted(self, count: Callable[[], int]) -> None:
        self.hosted_pipelines.set_function(count)

    def rpc_finished(self, method: str, code: str) -> None:
        self.rpcs.labels(method, code).inc()

    def stream_opened(self) -> None:
        self.active_streams.inc()

    def stream_closed(self) -> None:
        self.active_streams.dec()

    def batch_waited(self, seconds: float) -> None:
        self.batch_latency.observe(seconds)

    def batch_streamed(self, samples: int, nbytes: int) -> None:
        self.batches_streamed.inc()
        self.samples_streamed.inc(samples)
        self.bytes_streamed.inc(nbytes)

    def pipeline_streamed(self, pipeline: str, samples: int, waited: float) -> None:
        self.pipeline_load.streamed(pipeline, samples, waited)

    def decode_error(self) -> None:
        self.decode_errors.inc()

    def samples_failed(self, policy: str, count: int) -> None:
        self.samples_failed_total.labels(policy=policy).inc(count)

    def checkpoint_written(self, seconds: float) -> None:
        self.checkpoint_latency.observe(seconds)
        self.checkpoints_written.inc()

    def restored(self, seconds: float) -> None:
        self.restore_latency.observe(seconds)
        self.restores.inc()


class MetricsServer:
    """The HTTP exposition of one ``Metrics``; ``close()`` stops it."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self.httpd = httpd
        self.thread = thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_port)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def serve_metrics(address: str, metrics: Metrics) -> MetricsServer:
    """Serve ``metrics`` at http://address/metrics on a daemon thread (port 0 picks a free
    one: see ``MetricsServer.port``). Raises OSError if it cannot listen."""
    host, port = host_port(address, "metrics.listen")
    try:
        httpd, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot serve metrics on {address}: "
                                 f"{exc.strerror or exc}") from None
    return MetricsServer(httpd, thread)
