"""The kill -9 battery with automatic failover: at seeded points, a server is killed, and
the trainer's loop goes on through the client's failover; the stream it reads must equal
an uninterrupted run: 0 lost and 0 duplicated batches.

Each point is one of:
- ``stream``: the server streaming to the trainer is killed from outside, mid-stream
  (after a checkpoint, at some points);
- ``checkpoint.before_store`` / ``checkpoint.after_store``: the serving server dies inside
  the trainer's Checkpoint call, before Redis stores it or after, before the answer;
- ``restore.before_claim`` / ``restore.after_claim``: the serving server is killed, and
  the first server the client fails over to dies inside that Restore, before claiming the
  name or holding it; the client goes on to the next.
Deaths inside an RPC use the server's ``faults.kill_at`` (it sends itself SIGKILL there).

``make test`` runs a few points; the full battery is one command:

    CONVEYOR_FAULT_POINTS=200 .venv/bin/python -m pytest \
        tests/client/remote/test_fault_battery.py -s -o timeout=1800
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest

import conveyor
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.service.kill_points import POINTS as KILL_POINTS
from tests.support.resume import batch_bytes, reference
from tests.support.servers import ServerProcess, Start

POINTS = int(os.environ.get("CONVEYOR_FAULT_POINTS", "5"))
SEED = 20261123
KINDS = ("stream", *sorted(KILL_POINTS))


def seeded_plan(count: int) -> list[tuple[str, int]]:
    """(kind, batches read before it) for each point; the first point is a ``stream`` one
    (the first server writes the creation checkpoint, so it carries no kill point) and,
    in a short run, every kind comes once."""
    rng = random.Random(SEED)
    kinds = list(KINDS) if count >= len(KINDS) else ["stream"]
    kinds += [rng.choice(KINDS) for _ in range(count - len(kinds))]
    rng.shuffle(kinds)
    kinds.remove("stream")
    kinds.insert(0, "stream")
    return [(kind, rng.randrange(1, 6)) for kind in kinds]


def test_kill_9_at_seeded_points_loses_and_repeats_nothing(start_server: Start,
                                                           image_root: Path) -> None:
    plan = seeded_plan(POINTS)
    rng = random.Random(SEED + 1)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)

    def fresh(*kill_at: str) -> ServerProcess:
        """A server not yet started, carrying ``kill_at``."""
        return start_server.make(env={"CONVEYOR_FAULTS_KILL_AT": ",".join(kill_at)})

    def armed_for(point: int) -> list[str]:
        """What the server taking over at ``point`` must carry for the next point: the
        next point's Checkpoint kill, at the checkpoint it will be asked for (a failover
        at a Checkpoint retries that Checkpoint on the new server first)."""
        if point + 1 >= len(plan) or not plan[point + 1][0].startswith("checkpoint."):
            return []
        nth = 2 if plan[point][0].startswith("checkpoint.") else 1
        return [f"{plan[point + 1][0]}:{nth}"]

    def launched(point: int) -> tuple[ServerProcess, ServerProcess | None]:
        """The servers ``point`` goes to, started while the point before it runs: the one
        taking over and, at a ``restore.*`` point, the one dying inside that Restore. None
        is in the client's targets before its point, and the failover asks the targets
        alone (placement chose a server only for the creation, before any of these)."""
        kind = plan[point][0]
        return (fresh(*armed_for(point)).launch(),
                fresh(kind).launch() if kind.startswith("restore.") else None)

    current = fresh().start()
    done: Counter[str] = Counter()
    with conveyor.Client([current.address], timeout=10) as c:
        pipe = c.create("battery", spec)
        got = [batch_bytes(pipe.run())]
        servers = [launched(0)]
        for point, (kind, batches) in enumerate(plan):
            if point + 1 < len(plan):
                servers.append(launched(point + 1))
            target, dying = servers[point]
            got += [batch_bytes(pipe.run()) for _ in range(batches)]
            target.ready()
            if dying is not None:
                dying.ready()
            if kind == "stream":
                c.targets = [current.address, target.address]
                if rng.random() < 0.5:
                    pipe.checkpoint()
                current.kill()
            elif kind.startswith("checkpoint."):
                c.targets = [current.address, target.address]
                stored = pipe.checkpoint()  # the serving server dies inside this call
                assert stored.batches == len(got) and pipe.via == target.address
                assert current.proc is not None and current.proc.wait(10) == -9
            else:
                assert dying is not None
                c.targets = [current.address, dying.address, target.address]
                current.kill()
            # What the killed server had sent may still arrive; then the stream moves.
            while pipe.failovers == point and len(got) < 100_000:
                got.append(batch_bytes(pipe.run()))
            assert pipe.failovers == point + 1 and pipe.via == target.address
            if kind.startswith("restore."):
                assert dying is not None and dying.proc is not None \
                    and dying.proc.wait(10) == -9
            done[kind] += 1
            current = target
        got += [batch_bytes(pipe.run()) for _ in range(3)]
    expected = reference(spec, len(got))
    # Each batch's header index was checked against the trainer's count as it arrived;
    # here the bytes: the stream is the uninterrupted one, none lost, none repeated.
    differ = [i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(done.items()))
    print(f"\nkill -9 battery: {POINTS} points ({kinds}), {len(got)} batches, "
          f"{len(differ)} differ from the uninterrupted run, {pipe.failovers} failovers")
    assert not differ and pipe.failovers == POINTS


def test_kill_points_name_known_points_and_times() -> None:
    from conveyor.errors import InvalidArgument
    from conveyor_server.service.kill_points import KillPoints

    assert KillPoints(["restore.after_claim", "checkpoint.after_store:3"]).at == {
        "restore.after_claim": 1, "checkpoint.after_store": 3}
    for wrong in ("restore.during", "checkpoint.after_store:0", "checkpoint.after_store:x"):
        with pytest.raises(InvalidArgument, match="faults.kill_at"):
            KillPoints([wrong])
