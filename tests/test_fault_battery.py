"""The kill -9 battery with automatic failover: at seeded points (a batch count, and
whether a checkpoint was just written), the server serving the trainer is killed; the
trainer's loop goes on through the client's failover, and the stream it reads must equal
an uninterrupted run: 0 lost and 0 duplicated batches.

``make test`` runs a few points; the full battery is one command:

    CONVEYOR_FAULT_POINTS=200 .venv/bin/python -m pytest tests/test_fault_battery.py -s
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import conveyor
from conveyor_server.demo.run import rotate_pipeline
from tests.resume import batch_bytes
from tests.test_resume import reference
from tests.test_service import Start

POINTS = int(os.environ.get("CONVEYOR_FAULT_POINTS", "4"))
SEED = 20261123


def test_kill_9_at_seeded_points_loses_and_repeats_nothing(start_server: Start,
                                                           image_root: Path) -> None:
    rng = random.Random(SEED)
    plan = [(rng.randrange(1, 6), rng.random() < 0.5) for _ in range(POINTS)]
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    serving, spare = start_server(), start_server()
    with conveyor.Client([serving.address, spare.address], timeout=10) as c:
        pipe = c.create("battery", spec)
        got = [batch_bytes(pipe.run())]
        pipe.checkpoint()
        for point, (batches, checkpoint_first) in enumerate(plan):
            for _ in range(batches):
                got.append(batch_bytes(pipe.run()))
            if checkpoint_first:
                pipe.checkpoint()
            victim = next(s for s in (serving, spare) if s.address == pipe.via)
            victim.kill()  # the server streaming to the trainer, mid-stream
            replacement = start_server()
            serving = spare if victim is serving else serving
            spare = replacement
            c.targets = [serving.address, spare.address]
            # What the killed server had sent may still arrive; then the stream moves.
            while pipe.failovers == point and len(got) < 100_000:
                got.append(batch_bytes(pipe.run()))
            assert pipe.failovers == point + 1
        got += [batch_bytes(pipe.run()) for _ in range(3)]
    expected = reference(spec, len(got))
    # Each batch's header index was checked against the trainer's count as it arrived;
    # here the bytes: the stream is the uninterrupted one, none lost, none repeated.
    differ = [i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    print(f"\nkill -9 battery: {POINTS} points, {len(got)} batches, {len(differ)} differ "
          f"from the uninterrupted run, {pipe.failovers} failovers")
    assert not differ and pipe.failovers == POINTS
