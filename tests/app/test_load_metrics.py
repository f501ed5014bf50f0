"""The load signals an autoscaler and the dashboard read: per pipeline (samples delivered,
time starved, workers) and per server (worker threads, busy, capacity). The window of the
busy ratio on a clock of the test's; the rest on a real server, scraped over HTTP."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from conveyor_server.app.load_metrics import (
    BUSY_WINDOW_S,
    SAMPLE_STEP_S,
    BusyWindow,
    PipelineLoad,
)
from conveyor_server.demo.run import rotate_pipeline
from tests.app.test_metrics import Samples, metric, scrape, value
from tests.support.resume import run_batches
from tests.support.servers import Start, client, wait_for

TRAINER = "load-trainer-5d1e"
BRIEF = "load-brief-0b7c"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_busy_window_covers_at_least_its_window_and_clamps() -> None:
    clock, busy = Clock(), [0.0]
    window = BusyWindow(lambda: busy[0], threads=2, window_s=30.0, clock=clock)
    clock.now += 10
    busy[0] = 10.0                  # 10 thread-seconds in 10 s of 2 threads
    assert window.fraction() == 0.5
    assert window.fraction() == 0.5  # a second reader at the same time: the same measure
    clock.now += 30                 # idle for 30 s: the window no longer reaches the work
    assert window.fraction() == 0.0
    clock.now += 5
    busy[0] = 25.0                  # 15 thread-seconds in the last 35 s (window from t=10)
    assert window.fraction() == 15.0 / (35.0 * 2)
    clock.now += 1
    busy[0] = 1000.0                # more than the threads can do: clamped
    assert window.fraction() == 1.0


def test_busy_window_memory_is_bounded_by_its_window() -> None:
    clock, busy = Clock(), [0.0]
    window = BusyWindow(lambda: busy[0], threads=4, window_s=BUSY_WINDOW_S, clock=clock)
    for _ in range(5000):           # a reader every 0.1 s for 500 s
        clock.now += 0.1
        busy[0] += 0.2              # half of the 4 threads busy
        assert abs(window.fraction() - 0.5) < 1e-6
    assert len(window._samples) <= BUSY_WINDOW_S / SAMPLE_STEP_S + 2


def exposition(load: PipelineLoad) -> str:
    registry = CollectorRegistry()
    registry.register(load)
    return generate_latest(registry).decode()


def test_pipeline_series_exist_while_hosted_and_are_forgotten_after() -> None:
    hosted = {"a", "b"}
    load = PipelineLoad()
    load.watch(lambda: set(hosted))
    load.streamed("a", 8, 0.25)
    load.streamed("a", 8, 0.5)
    text = exposition(load)
    assert 'conveyor_pipeline_samples_streamed_total{pipeline="a"} 16.0' in text
    assert 'conveyor_pipeline_starved_seconds_total{pipeline="a"} 0.75' in text
    # Hosted, never streamed: its counters start at 0, so rate() sees its first batches.
    assert 'conveyor_pipeline_samples_streamed_total{pipeline="b"} 0.0' in text
    assert 'conveyor_pipeline_workers{pipeline="b"} 1.0' in text
    hosted.discard("a")
    text = exposition(load)
    assert 'pipeline="a"' not in text and 'pipeline="b"' in text
    hosted.add("a")                 # back on this server: a new counter, from 0
    assert 'conveyor_pipeline_samples_streamed_total{pipeline="a"} 0.0' in exposition(load)


def test_names_of_gone_pipelines_are_dropped_without_a_scrape() -> None:
    """A server nobody scrapes keeps the counts of the pipelines it hosts, no more."""
    hosted: set[str] = set()
    load = PipelineLoad()
    load.watch(lambda: set(hosted))
    for i in range(1000):
        hosted.clear()
        hosted.add(f"p{i}")
        load.streamed(f"p{i}", 4, 0.0)
    assert list(load._counts) == ["p999"]


def pipeline_value(samples: Samples, name: str, pipeline: str) -> float:
    key = (name, frozenset({("pipeline", pipeline)}))
    assert key in samples, f"no {name} for {pipeline}"
    return samples[key]


def test_load_signals_move_while_a_pipeline_streams(start_server: Start,
                                                    image_root: Path) -> None:
    server = start_server("--max-pipelines", "3", "--max-streams", "5", metrics=True,
                          env={"CONVEYOR_LIMITS_WORKER_THREADS": "2"})
    before, text = scrape(server)
    assert value(before, "conveyor_worker_threads") == 2
    assert value(before, "conveyor_max_pipelines") == 3
    assert value(before, "conveyor_max_streams") == 5
    assert 0 <= value(before, "conveyor_worker_busy_ratio") <= 1
    assert "pipeline=" not in text
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=4)

    with client(server) as c:
        pipe = c.create(TRAINER, spec)
        created, _ = scrape(server)
        assert pipeline_value(created, "conveyor_pipeline_workers", TRAINER) == 1
        assert pipeline_value(created, "conveyor_pipeline_samples_streamed_total",
                              TRAINER) == 0
        started = time.perf_counter()
        run_batches(pipe, 5)  # type: ignore[arg-type]
        pipe.close()
        wait_for(lambda: metric(server, "conveyor_active_streams") == 0, "the stream to end")
        streamed_for = time.perf_counter() - started
        info = c.pipeline(TRAINER)
        samples, _ = scrape(server)
        delivered = pipeline_value(samples, "conveyor_pipeline_samples_streamed_total",
                                   TRAINER)
        assert delivered == info.sent * 4 >= 5 * 4
        assert delivered == value(samples, "conveyor_samples_streamed_total")
        starved = pipeline_value(samples, "conveyor_pipeline_starved_seconds_total", TRAINER)
        # The first batch at least was computed while the stream waited for it; every wait
        # is one the batch latency histogram saw, within the stream's life.
        assert 0 < starved <= value(samples, "conveyor_batch_latency_seconds_sum") + 1e-9
        assert starved < streamed_for
        assert value(samples, "conveyor_worker_busy_seconds_total") > 0
        # The window reaches back before the batches were computed.
        assert 0 < value(samples, "conveyor_worker_busy_ratio") <= 1

        # A second pipeline: its series appear, and go with it.
        brief = c.create(BRIEF, spec)
        run_batches(brief, 1)  # type: ignore[arg-type]
        brief.close()
        wait_for(lambda: metric(server, "conveyor_active_streams") == 0, "the stream to end")
        samples, _ = scrape(server)
        assert pipeline_value(samples, "conveyor_pipeline_samples_streamed_total",
                              BRIEF) >= 4
        assert pipeline_value(samples, "conveyor_pipeline_workers", BRIEF) == 1
        c.delete(BRIEF)
        samples, text = scrape(server)
    assert BRIEF not in text
    assert pipeline_value(samples, "conveyor_pipeline_samples_streamed_total",
                          TRAINER) == delivered
    labelled = {dict(labels)["pipeline"] for _, labels in samples if dict(labels).get("pipeline")}
    assert labelled == {TRAINER}
