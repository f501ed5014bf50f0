"""``Client.open``: the same call for a trainer's first start and every later one. The same
run goes on where it stood (its newest checkpoint, or the trainer's own count); another run
starts afresh from batch 0 with the same spec; the holder may be alive or dead."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import conveyor
from conveyor import errors, fn
from conveyor.cli import main as cli
from conveyor.definition.spec import as_spec
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, client


def test_the_same_run_goes_on_and_another_starts_afresh(
        start_server: Start, image_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 8)
    with client(server) as c:
        first = c.open("trained", spec, run_id="run-1")  # free: created for run-1
        assert [batch_bytes(first.run()) for _ in range(3)] == expected[:3]
        saved = first.checkpoint()
        first.run(), first.run()  # consumed, then the trainer dies before its checkpoint
        assert c.pipeline("trained").run_id == "run-1"
        assert {ck.run_id for ck in c.checkpoints("trained")} == {"run-1"}
        assert saved.run_id == "run-1"

        again = c.open("trained", spec, run_id="run-1")  # pause/reactivate
        assert again.consumed == 3 and batch_bytes(again.run()) == expected[3]
        counted = c.open("trained", spec, run_id="run-1", consumed=5)  # its own count
        assert batch_bytes(counted.run()) == expected[5]
        unnamed = c.open("trained", spec)  # no run named: whichever run holds it
        assert unnamed.consumed == 3 and c.pipeline("trained").run_id == "run-1"

        trial = c.open("trained", spec, run_id="run-2")  # continue-trial: batch 0
        assert [batch_bytes(trial.run()) for _ in range(2)] == expected[:2]
        assert c.pipeline("trained").run_id == "run-2"
        runs = [ck.run_id for ck in c.checkpoints("trained")]
        assert "run-1" in runs and runs[-1] == "run-2", "the old run's checkpoints are kept"
        with pytest.raises(errors.FailedPrecondition):
            # (after the batches sent ahead: gRPC's window holds dozens of these small ones)
            for _ in range(2000):
                again.run()  # the old run's stream was fenced by the new run
    assert cli(["--server", server.address, "describe", "trained"]) == 0
    assert "run:           run-2" in capsys.readouterr().out


def test_a_run_goes_on_after_its_server_died(start_server: Start, image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 6)
    with client(a) as first_start:
        pipe = first_start.open("orphan", spec, run_id="r")
        pipe.run(), pipe.run()
        pipe.checkpoint()
    a.kill()
    with conveyor.Client([a.address, b.address], timeout=10) as restarted:
        again = restarted.open("orphan", spec, run_id="r")
        assert again.via == b.address and again.consumed == 2
        assert batch_bytes(again.run()) == expected[2]
        fresh = restarted.open("orphan", spec, run_id="r-next")  # its holder is B now
        assert batch_bytes(fresh.run()) == expected[0]


def test_another_spec_under_the_name_is_refused(start_server: Start,
                                                image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    other = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    with client(server) as c:
        c.open("kept", spec, run_id="a")
        for run_id in ("a", "b"):
            with pytest.raises(errors.SpecMismatch, match="another spec"):
                c.open("kept", other, run_id=run_id)
        assert c.pipeline("kept").run_id == "a"


def test_a_seedless_definition_goes_on_with_the_seed_the_pipeline_drew(
        start_server: Start, image_root: Path) -> None:
    """A definition without a seed draws one each time it is made (DALI's default): opening
    the pipeline again with a fresh one goes on with the seed drawn first; a seed given
    explicitly that differs is still refused."""
    @conveyor.pipeline_def(batch_size=2, num_threads=1, enable_checkpointing=True)
    def seedless() -> Any:
        jpegs, labels = fn.readers.file(file_root=str(image_root / "imgs"), random_shuffle=True)
        images = fn.decoders.image(jpegs)
        return fn.rotate(images, angle=fn.random.uniform(range=(-30.0, 30.0)), fill_value=0), labels

    first, later = as_spec(seedless()), as_spec(seedless())
    assert first.seed != later.seed and first.seed_drawn and later.seed_drawn
    expected = reference(first, 5)
    server = start_server()
    with client(server) as c:
        pipe = c.open("seedless", first, run_id="r")
        assert [batch_bytes(pipe.run()) for _ in range(3)] == expected[:3]
        pipe.checkpoint()
        pipe.close()
        again = c.open("seedless", later, run_id="r")
        assert again.consumed == 3 and batch_bytes(again.run()) == expected[3]
        again.close()
        explicit = as_spec(seedless(seed=later.seed))
        with pytest.raises(errors.SpecMismatch, match="another spec"):
            c.open("seedless", explicit, run_id="r")


def test_a_run_goes_on_after_its_dead_servers_lease_ran_out(start_server: Start,
                                                            image_root: Path) -> None:
    """A name whose server died exists until someone takes it: once its lease ran out a
    plain create may claim it, but ``open`` still resumes the run where it stood."""
    short = {"CONVEYOR_REDIS_LEASE_S": "2"}
    a, b = start_server(env=short), start_server(env=short)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 6)
    with client(a) as first_start:
        pipe = first_start.open("expired", spec, run_id="r")
        pipe.run(), pipe.run(), pipe.run()
        pipe.checkpoint()
    a.kill()
    time.sleep(2.5)  # the dead holder's lease ran out
    with client(b) as restarted:
        again = restarted.open("expired", spec, run_id="r")
        assert again.consumed == 3 and batch_bytes(again.run()) == expected[3]
        assert restarted.pipeline("expired").run_id == "r"
        unnamed = restarted.open("expired", spec)  # whichever run holds it: the same
        assert unnamed.consumed == 3 and batch_bytes(unnamed.run()) == expected[3]


def test_a_new_run_fails_over_from_its_own_checkpoints(start_server: Start,
                                                       image_root: Path) -> None:
    """The name keeps the old run's checkpoints; a failover of the new run resumes from the
    new run's, so it stays the new run (a later open of that run goes on, not afresh)."""
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 6)
    with conveyor.Client([a.address, b.address], timeout=10, place=False) as c:
        old = c.open("runs", spec, run_id="r1")
        for _ in range(3):
            old.run()
        old.checkpoint()  # the old run's, at batch 3
        new = c.open("runs", spec, run_id="r2")
        assert new.via == a.address
        history = [batch_bytes(new.run()) for _ in range(2)]
        new.checkpoint()  # the new run's, at batch 2
        history += [batch_bytes(new.run()) for _ in range(2)]
        a.kill()
        history += [batch_bytes(new.run()) for _ in range(2)]  # failed over to B at 4
        assert history == expected and new.failovers == 1
        assert new.describe().run_id == "r2"
        assert new.checkpoint().run_id == "r2"


def test_a_position_the_service_does_not_hold_is_refused_not_restarted(
        start_server: Start, image_root: Path) -> None:
    """A trainer's own count of a run whose pipeline is gone (deleted, expired, another
    Redis) is refused: starting the run again at batch 0 would repeat its data."""
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 3)
    with client(server) as c:
        with pytest.raises(errors.NotFound, match="consumed 4 batches of run 'r'.*free"):
            c.open("gone", spec, run_id="r", consumed=4)
        with pytest.raises(errors.NotFound):
            c.pipeline("gone")  # nothing was created
        first = c.open("gone", spec, run_id="r", consumed=0)  # a count of 0: a fresh start
        assert batch_bytes(first.run()) == expected[0]
        with pytest.raises(errors.NotFound, match="consumed 2 batches of run 'other'.*"
                                                  "holds run 'r'"):
            c.open("gone", spec, run_id="other", consumed=2)
        assert c.pipeline("gone").run_id == "r"  # the run holding it was left alone
