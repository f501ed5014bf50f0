"""A pipeline closed while its stream is inside the engine: a restore of the same name on
the same server, or a delete, races the stream's next batch. The stream ends with the
error of what closed it (FENCED, NOT_FOUND), never INTERNAL or UNKNOWN, and the server
goes on serving the pipeline that replaced it."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, client, wait_for

ROUNDS = 40


def stream_until_it_ends(pipe: object, ended: Counter[str], running: threading.Event) -> None:
    try:
        while True:
            pipe.run()  # type: ignore[attr-defined]
            running.set()
    except errors.ConveyorError as exc:
        ended[exc.code] += 1
    except Exception as exc:  # anything outside the error tree is a failure
        ended[f"{type(exc).__name__}: {exc}"] += 1


def test_restore_and_delete_racing_a_busy_stream_end_it_with_their_own_error(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, num_threads=2,
                           prefetch_queue_depth=3)
    expected = reference(spec, 4)
    ended: Counter[str] = Counter()
    with client(server, failover=False) as trainer, client(server) as operator:
        blob = trainer.create("raced", spec).checkpoint().data
        for round_ in range(ROUNDS):
            pipe = trainer.attach("raced")
            running = threading.Event()
            streaming = threading.Thread(target=stream_until_it_ends,
                                         args=(pipe, ended, running))
            streaming.start()
            running.wait(20)
            if round_ % 3 == 2:
                operator.delete("raced")
                operator.create("raced", spec).close()
            else:
                operator.restore("raced", blob).close()
            streaming.join(20)
            assert not streaming.is_alive()
            pipe.close()
        assert set(ended) <= {"FAILED_PRECONDITION", "NOT_FOUND"}, ended
        assert sum(ended.values()) == ROUNDS
        # The pipeline that replaced the last one streams exactly.
        fresh = trainer.attach("raced")
        assert [batch_bytes(fresh.run()) for _ in range(4)] == expected
        wait_for(lambda: operator.pipeline("raced").streaming, "the fresh stream")
