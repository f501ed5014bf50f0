"""The holder (the server keeping the pipeline's name, lease and checkpoints) killed (-9)
mid fan-in: the other workers go on computing, the trainer loses and repeats nothing, and
its next ``checkpoint()`` fails the pipeline over to another server (the design: the
holder's loss stops no batch; the name and lease move at the next checkpoint, as without
fan-in), after which the stream goes on from the new holder's checkpoint."""

from __future__ import annotations

from pathlib import Path

from tests.fleet.support import fleet, read_on, rotating, trainer
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start

COUNT = 30
#: The longest a trainer may wait for one batch across the holder's loss.
STALL_S = 5.0


def test_the_holder_killed_mid_stream_loses_and_repeats_nothing(
        start_server: Start, image_root: Path) -> None:
    holder, *others = fleet(start_server, 3)
    spec = rotating(image_root)
    expected = reference(spec, COUNT + 10)
    with trainer(holder, *others) as c:
        pipe = c.open("headless", spec, run_id="run", workers=3)
        got = [batch_bytes(pipe.run()) for _ in range(4)]
        assert pipe.checkpoint().batches == 4  # what a failover resumes from
        got += [batch_bytes(pipe.run()) for _ in range(4)]
        assert pipe.via == holder.address and holder.address in pipe.workers
        holder.kill()
        stall = read_on(pipe, got, COUNT)
        assert holder.address not in pipe.workers
        assert pipe.via == holder.address, "the batches needed no failover"
        assert stall < STALL_S, f"the trainer waited {stall:.1f} s for a batch"
        saved = pipe.checkpoint()  # the holder is gone: the pipeline moves here
        assert saved.batches == COUNT
        assert pipe.failovers == 1 and pipe.via in {s.address for s in others}
        assert c.pipeline("headless", via=pipe.via).holder == pipe.via
        got += [batch_bytes(pipe.run()) for _ in range(10)]
        fan = pipe.fan_in
        assert fan is not None and fan.mismatches == 0
        assert sorted(pipe.workers) == sorted(s.address for s in others)
    assert got == expected, "a batch was lost or repeated"
