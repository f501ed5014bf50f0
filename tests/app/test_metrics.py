"""Metrics and structured logs of a real server: scraped over HTTP, read from its stderr."""

from __future__ import annotations

import json
import platform
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conveyor import errors
from conveyor.transport.wire import batch_header, encode_frames, header_frame
from conveyor_server import Pipeline, __version__
from conveyor_server.app.metrics import engine_labels
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.identity.behaviour.measure import process_behaviour
from tests.support.images import make_image_folder
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import ServerProcess, Start, client, wait_for

#: Distinctive, so that finding them anywhere in the exposition is a finding.
NAME = "probe-pipeline-7f3a"
COPY = "probe-copy-91c2"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: ServerProcess) -> tuple[Samples, str]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, text


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for a labelled counter child that was never created."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def metric(server: ServerProcess, name: str, **labels: str) -> float:
    return value(scrape(server)[0], name, **labels)


def frame_bytes(spec: Any, batches: int, data_channel: bool = True) -> int:
    """The bytes of the first ``batches`` batches, encoded in process: on a data channel
    each one's header frame and its data, else its frames."""
    with Pipeline(spec) as local:
        if data_channel:
            headers = [batch_header(i, b)[0]
                       for i, b in enumerate(run_batches(local, batches))]
            return sum(len(header_frame(h)) + h.total_bytes for h in headers)
        return sum(len(f) for i, b in enumerate(run_batches(local, batches))
                   for f in encode_frames(i, b))


def test_counters_histograms_and_gauges_move_by_exact_amounts(
    start_server: Start, image_root: Path
) -> None:
    server = start_server(metrics=True)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=4)
    before, _ = scrape(server)
    assert value(before, "conveyor_batches_streamed_total") == 0
    assert value(before, "conveyor_active_streams") == 0
    assert value(before, "conveyor_hosted_pipelines") == 0
    engine = engine_labels(process_behaviour())  # the server runs on this machine's paths
    assert value(before, "conveyor_build_info", version=__version__,
                 python=platform.python_version(), **engine) == 1
    assert len(engine["behaviour"]) == 16 and "numpy" in engine["cpu"]
    assert 0 < value(before, "conveyor_behaviour_probe_seconds") < 60

    with client(server) as c:
        pipe = c.create(NAME, spec)
        consumed = run_batches(pipe, 3)  # type: ignore[arg-type]
        assert pipe.data_channel
        assert metric(server, "conveyor_active_streams") == 1
        assert metric(server, "conveyor_hosted_pipelines") == 1
        ckpt = pipe.checkpoint()
        assert ckpt.batches == 3
        pipe.close()
        wait_for(lambda: metric(server, "conveyor_active_streams") == 0, "the stream to end")
        info = c.pipeline(NAME)
        assert not info.streaming and info.sent >= 3  # what was consumed, plus sent ahead
        with pytest.raises(errors.NotFound):
            c.pipeline("ghost")

        samples, text = scrape(server)
        sent = info.sent
        assert value(samples, "conveyor_batches_streamed_total") == sent
        assert value(samples, "conveyor_samples_streamed_total") == sent * 4
        assert value(samples, "conveyor_bytes_streamed_total") == frame_bytes(spec, sent)
        payload = sum(len(data) for batch in consumed for out in batch_bytes(batch)
                      for _, _, data in out)
        assert frame_bytes(spec, 3) > payload > 0  # the tensors plus headers
        assert frame_bytes(spec, 3, data_channel=False) > frame_bytes(spec, 3)
        # The stream asked the engine for every batch sent, and at most for those produced.
        assert sent <= value(samples, "conveyor_batch_latency_seconds_count") <= info.produced
        assert value(samples, "conveyor_batch_latency_seconds_sum") > 0
        # The creation checkpoint and the trainer's.
        assert value(samples, "conveyor_checkpoints_written_total") == 2
        assert value(samples, "conveyor_checkpoint_latency_seconds_count") == 2
        assert value(samples, "conveyor_checkpoint_latency_seconds_bucket", le="+Inf") == 2
        assert value(samples, "conveyor_restores_total") == 0
        assert value(samples, "conveyor_decode_errors_total") == 0
        rpcs = {dict(labels)["method"] + " " + dict(labels)["code"]: v
                for (name, labels), v in samples.items() if name == "conveyor_rpcs_total"}
        # (ListServers: the client learns the fleet as its first stream opens.)
        assert rpcs == {"CreatePipeline OK": 1, "Checkpoint OK": 1,
                        "StreamBatches CANCELLED": 1, "DescribePipeline OK": 1,
                        "DescribePipeline NOT_FOUND": 1, "ListServers OK": 1}

        copy = c.restore(COPY, checkpoint=ckpt.id)
        with Pipeline(spec, checkpoint=ckpt.data) as local:
            assert batch_bytes(copy.run()) == batch_bytes(local.run())
        samples, text = scrape(server)
        assert value(samples, "conveyor_restores_total") == 1
        assert value(samples, "conveyor_restore_latency_seconds_count") == 1
        assert value(samples, "conveyor_rpcs_total", method="Restore", code="OK") == 1
        assert value(samples, "conveyor_hosted_pipelines") == 2
        assert value(samples, "conveyor_active_streams") == 1
        assert value(samples, "conveyor_batches_streamed_total") >= sent + 1
        # The client ends its stream first: a delete ends a stream only once the stream
        # asks for its next batch, and one blocked on flow control (the copy's consumer
        # reads no more) would wait for its client.
        copy.close()
        c.delete(COPY)
        wait_for(lambda: metric(server, "conveyor_active_streams") == 0, "the copy's stream")
        samples, text = scrape(server)
        assert value(samples, "conveyor_hosted_pipelines") == 1

    # Pipeline names are unbounded: only the pipelines hosted now appear, as the label
    # ``pipeline`` (at most limits.max_pipelines); the deleted copy is gone.
    assert COPY not in text
    for (_, labels) in samples:
        assert dict(labels).keys() <= {"method", "code", "le", "version", "python",
                                       "pipeline", *engine}
        assert dict(labels).get("pipeline", NAME) == NAME


def test_a_corrupt_data_file_counts_one_decode_error(start_server: Start,
                                                     tmp_path: Path) -> None:
    root = make_image_folder(tmp_path / "root" / "imgs", counts=(4, 4))
    (root / "class_1" / "img_001.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    server = start_server(roots=[tmp_path / "root"], metrics=True)
    with client(server) as c:
        pipe = c.create("damaged", rotate_pipeline(str(root), batch_size=4,
                                                   prefetch_queue_depth=1))
        with pytest.raises(errors.DataLoss, match="img_001.jpg"):
            for _ in range(2):  # the first epoch reads every file in batches 0 and 1
                pipe.run()
        wait_for(lambda: metric(server, "conveyor_active_streams") == 0, "the stream to end")
    samples, _ = scrape(server)
    assert value(samples, "conveyor_decode_errors_total") == 1
    assert value(samples, "conveyor_rpcs_total", method="StreamBatches", code="DATA_LOSS") == 1


def test_json_logs_carry_pipeline_and_checkpoint_id(start_server: Start,
                                                    image_root: Path) -> None:
    server = start_server("--log-format", "json")
    with client(server) as c:
        pipe = c.create(NAME, rotate_pipeline(str(image_root / "imgs")))
        run_batches(pipe, 2)  # type: ignore[arg-type]
        ckpt = pipe.checkpoint()
        pipe.close()
        restored = c.restore(COPY, checkpoint=ckpt.id)
        c.delete(restored.name)
    records = [json.loads(line) for line in server.log_path.read_text().splitlines() if line]
    assert records and all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    written = [r for r in records
               if r.get("pipeline") == NAME and r.get("checkpoint_id") == ckpt.id]
    assert written and written[0]["batches"] == 2 and ckpt.id in written[0]["msg"]
    restores = [r for r in records if r.get("pipeline") == COPY and "checkpoint_id" in r]
    assert [r["checkpoint_id"] for r in restores] == [ckpt.id]
    started = [r for r in records if r.get("pipeline") == NAME and "peer" in r]
    assert started and started[0]["batches"] == 0
    assert any(r["msg"].startswith("created pipeline") and r.get("pipeline") == NAME
               for r in records)
    assert any(r["msg"].startswith("deleted pipeline") and r.get("pipeline") == COPY
               for r in records)
