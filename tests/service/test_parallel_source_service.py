"""``fn.external_source(parallel=True)`` served: registered sources computed in the server's
worker processes (started with spawn, whatever the spec asks) stream the bytes the serial
source gives in process, resume on another server exactly (also a trainer ahead of its
checkpoint), and deleting the pipeline ends its worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conveyor import fn, pipeline_def, types
from conveyor_server import Pipeline
from tests.service.test_external_source_service import with_sources
from tests.support.resume import assert_same_stream, run_across_epochs, run_batches
from tests.support.servers import Start, client


def both_conventions(parallel: bool) -> Any:
    @pipeline_def(batch_size=4, num_threads=2, seed=9, enable_checkpointing=True,
                  py_num_workers=2, py_start_method="fork")
    def pipeline() -> Any:
        images, labels = fn.external_source(source="tests.support.external_sources:samples",
                                            batch=False, num_outputs=2, parallel=parallel,
                                            dtype=[types.UINT8, types.INT32],
                                            layout=["HWC", ""])
        vectors = fn.external_source(source="tests.support.external_sources:batches",
                                     batch_info=True, parallel=parallel)
        angles = fn.random.uniform(range=(-10.0, 10.0))
        return fn.rotate(images, angle=angles, fill_value=0), labels, vectors, angles
    return pipeline()


def source_workers(server_pid: int) -> list[int]:
    """The server's children that are source worker processes (fresh interpreters running
    the worker module)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
        if parent == server_pid and b"conveyor_server.engine.stages.source_worker" in command:
            found.append(int(entry.name))
    return found


def test_registered_sources_stream_exactly_from_worker_processes(start_server: Start) -> None:
    a, b = with_sources(start_server), with_sources(start_server)
    assert a.proc is not None and b.proc is not None
    with Pipeline(both_conventions(False)) as local:
        reference = run_batches(local, 16)
    spec = both_conventions(True)
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("parallel", spec)
        streamed, saved = [], {}
        for k in range(8):
            if k in (2, 5):
                saved[k] = pipe.checkpoint()
            streamed.extend(run_across_epochs(pipe, 1))
        assert_same_stream(reference[:8], streamed, "server A, parallel")
        assert len(source_workers(a.proc.pid)) == 2
        for k, checkpoint in saved.items():
            restored = cb.restore(f"copy-{k}", checkpoint=checkpoint.id)
            assert_same_stream(reference[k:k + 4], run_across_epochs(restored, 4),
                               f"restored on B after {k} batches")
            restored.close()
            cb.delete(f"copy-{k}")
        ahead = cb.restore("ahead", checkpoint=saved[2].id, consumed=11)
        assert_same_stream(reference[11:14], run_across_epochs(ahead, 3), "11 batches ahead")
        ahead.close()
        cb.delete("ahead")
        pipe.close()
        ca.delete("parallel")
    assert source_workers(a.proc.pid) == [] and source_workers(b.proc.pid) == []
