"""The load signals of one server, for autoscaling and the dashboard (``deploy/grafana``).

Per pipeline hosted here, labelled ``pipeline``:

- ``conveyor_pipeline_samples_streamed_total``: samples in the batches its streams sent
  (``rate()``: images per second delivered to its trainer);
- ``conveyor_pipeline_starved_seconds_total``: seconds its stream waited for the engine's
  next batch with none ready to send (``rate()``: the fraction of time the trainer's supply
  stalled on this server); counted when the batch goes out;
- ``conveyor_pipeline_workers``: 1 for each pipeline whose batches this server computes.
  Summed over the fleet by ``pipeline`` it counts the servers computing for it (its holder
  today); a server computing a share of another's batches reports 1 for that pipeline
  as well.

Per server: ``conveyor_worker_threads`` (the compute threads every pipeline shares),
``conveyor_worker_busy_seconds_total`` (their time spent computing),
``conveyor_worker_busy_ratio`` (the fraction of it over the last ``BUSY_WINDOW_S`` or more:
what a HorizontalPodAutoscaler reads through a Prometheus adapter), and the capacity,
``conveyor_max_pipelines`` and ``conveyor_max_streams``.

Cardinality stays bounded: a pipeline's series exist only while it is hosted here, at most
``limits.max_pipelines`` at once; one that leaves (deleted, restored on another server)
drops out at the next scrape, and its counts are forgotten.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

#: The busy ratio covers at least this many seconds (two scrapes at the usual 15 s).
BUSY_WINDOW_S = 30.0
#: Reads closer together than this share one sample of the window (bounds its memory).
SAMPLE_STEP_S = 1.0

SAMPLES = "conveyor_pipeline_samples_streamed"
STARVED = "conveyor_pipeline_starved_seconds"
WORKERS = "conveyor_pipeline_workers"


class BusyWindow:
    """The fraction of ``threads`` threads' time spent busy over at least the last
    ``window_s`` seconds: ``busy_seconds()`` is a counter of busy thread-seconds
    (``WorkerPool.busy_seconds``). The window runs from the newest reading at least
    ``window_s`` old (from the start until there is one), so any number of readers
    (two Prometheus replicas) see the same measure."""

    def __init__(self, busy_seconds: Callable[[], float], threads: int,
                 window_s: float = BUSY_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._busy_seconds = busy_seconds
        self._threads = max(1, threads)
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, float]] = deque([(clock(), busy_seconds())])

    def fraction(self) -> float:
        with self._lock:
            now, busy = self._clock(), self._busy_seconds()
            samples = self._samples
            while len(samples) > 1 and samples[1][0] <= now - self._window_s:
                samples.popleft()
            then, before = samples[0]
            if now - samples[-1][0] >= SAMPLE_STEP_S:
                samples.append((now, busy))
        if now <= then:
            return 0.0
        return min(1.0, max(0.0, (busy - before) / ((now - then) * self._threads)))


class PipelineLoad:
    """Per-pipeline counts, recorded by the stream (``pipeline_streamed``) and exported for
    the pipelines ``hosted()`` names now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: name -> [samples, starved seconds]
        self._counts: dict[str, list[float]] = {}
        self._hosted: Callable[[], Collection[str]] | None = None

    def watch(self, hosted: Callable[[], Collection[str]]) -> None:
        """``hosted()`` names the pipelines this server hosts now."""
        self._hosted = hosted

    def streamed(self, pipeline: str, samples: int, waited: float) -> None:
        with self._lock:
            counts = self._counts.get(pipeline)
            if counts is None:  # a new name: forget those no longer hosted
                self._forget_gone()
                counts = self._counts[pipeline] = [0.0, 0.0]
            counts[0] += samples
            counts[1] += waited

    def _forget_gone(self, hosted: Collection[str] | None = None) -> None:
        if hosted is None and self._hosted is not None:
            hosted = self._hosted()
        if hosted is not None:
            for name in [n for n in self._counts if n not in hosted]:
                del self._counts[name]

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily, GaugeMetricFamily]:
        return (
            CounterMetricFamily(SAMPLES, "Samples in the batches streamed to this pipeline's "
                                "consumer (rate: images per second delivered).",
                                labels=["pipeline"]),
            CounterMetricFamily(STARVED, "Seconds this pipeline's stream waited for the "
                                "engine's next batch with none ready to send (rate: the "
                                "fraction of time its trainer's supply stalled here).",
                                labels=["pipeline"]),
            GaugeMetricFamily(WORKERS, "1 for each pipeline whose batches this server "
                              "computes (summed by pipeline over the fleet: the servers "
                              "computing for it).", labels=["pipeline"]))

    def collect(self) -> Iterator[Metric]:
        samples, starved, workers = self._families()
        hosted = list(self._hosted()) if self._hosted is not None else None
        with self._lock:
            self._forget_gone(hosted)
            names = sorted(self._counts if hosted is None else set(hosted))
            counts = [(name, *self._counts.get(name, (0.0, 0.0))) for name in names]
        for name, count, waited in counts:
            samples.add_metric([name], count)
            starved.add_metric([name], waited)
            workers.add_metric([name], 1.0)
        yield from (samples, starved, workers)


class ServerLoad:
    """The server's compute threads, how busy they are, and its capacity; nothing until
    ``watch`` names them."""

    def __init__(self) -> None:
        self._watched: tuple[Callable[[], float], BusyWindow, int, int, int] | None = None

    def watch(self, busy_seconds: Callable[[], float], threads: int, max_pipelines: int,
              max_streams: int) -> None:
        self._watched = (busy_seconds, BusyWindow(busy_seconds, threads), threads,
                         max_pipelines, max_streams)

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def _families(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        return [
            GaugeMetricFamily("conveyor_worker_threads", "Threads computing batches for "
                              "every pipeline this server hosts (limits.worker_threads)."),
            CounterMetricFamily("conveyor_worker_busy_seconds", "Thread-seconds the worker "
                                "threads spent computing (rate / conveyor_worker_threads: "
                                "the busy fraction)."),
            GaugeMetricFamily("conveyor_worker_busy_ratio", "Fraction of the worker "
                              f"threads' time spent computing over the last "
                              f"{BUSY_WINDOW_S:.0f} s or more (0 to 1)."),
            GaugeMetricFamily("conveyor_max_pipelines", "The most pipelines this server "
                              "hosts (limits.max_pipelines)."),
            GaugeMetricFamily("conveyor_max_streams", "The most consumer streams this "
                              "server serves at once (limits.max_streams)."),
        ]

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        if self._watched is not None:
            busy_seconds, window, threads, max_pipelines, max_streams = self._watched
            values = (threads, busy_seconds(), window.fraction(), max_pipelines, max_streams)
            for family, value in zip(families, values, strict=True):
                family.add_metric([], float(value))
        yield from families
