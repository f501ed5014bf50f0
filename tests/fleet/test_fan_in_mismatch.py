"""A hedged batch whose two copies differ: the fan-in counts it (``mismatches``), logs the
index and the server, and the trainer keeps the copy that arrived first.

No server is told to misbehave. Two real servers compute the same pipeline, and its
external source reads the host's environment (``tests/fleet/sources.py``), as a user's
source reading a local file might: their behaviour digests are equal, their bytes are
not. The odd server is reached through a real TCP forwarder (it advertises the forwarder's
address) that holds its answers back for a while: the trainer waits on one of its batches,
hedges them to the other server, takes those copies, and the held ones arrive afterwards
and are compared."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

import conveyor
from conveyor import fn, pipeline_def, types
from conveyor.remote.fan_in_worker import Worker
from tests.fleet.holding_proxy import HoldingProxy
from tests.fleet.sources import SALT, SALTED
from tests.fleet.support import source_env
from tests.support.resume import batch_bytes, reference
from tests.support.servers import DEADLINE, Start, wait_for

COUNT = 40
ODD_SALT = "7"


@pipeline_def(batch_size=4, num_threads=1, seed=5, enable_checkpointing=True)
def from_the_host() -> Any:
    return fn.external_source(source=SALTED, batch=False, dtype=types.INT64)


@pytest.fixture
def proxy() -> Iterator[HoldingProxy]:
    held = HoldingProxy()
    try:
        yield held
    finally:
        held.close()


def test_a_hedged_copy_with_other_bytes_is_counted_and_the_first_copy_kept(
        start_server: Start, proxy: HoldingProxy, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    env = source_env(CONVEYOR_EXTERNAL_SOURCES=SALTED)
    holder = start_server(env=env)
    odd = start_server("--advertise", proxy.address, env={**env, SALT: ODD_SALT})
    proxy.forward_to(odd.address)
    spec = from_the_host()
    honest = reference(spec, COUNT)
    monkeypatch.setenv(SALT, ODD_SALT)
    other = reference(spec, COUNT)
    monkeypatch.delenv(SALT)
    assert all(h != o for h, o in zip(honest, other, strict=True))
    caplog.set_level(logging.ERROR, logger="conveyor.client")
    # Keepalive far beyond the hold: the odd server's call must outlive it.
    with conveyor.Client([holder.address], timeout=DEADLINE, place=False, keepalive_s=30,
                         keepalive_timeout_s=30) as c:
        pipe = c.open("mixed", spec, workers=2)
        fan = pipe.fan_in
        assert fan is not None
        got: list[Any] = []

        def odd_worker() -> Worker:
            with fan.cond:
                return next(w for w in fan.workers if w.address == proxy.address)
        started = time.monotonic()
        while odd_worker().delivered < 2:
            assert time.monotonic() - started < DEADLINE, "the odd server computed nothing"
            got.append(batch_bytes(pipe.run()))
        assert sorted(pipe.workers) == sorted([holder.address, proxy.address])
        proxy.answers.clear()  # the odd server's batches now wait in the forwarder
        before = fan.mismatches, fan.reruns
        # The trainer waits on one of the odd server's batches, suspects it and hedges
        # its indices to the holder ...
        while fan.reruns == before[1]:
            assert len(got) < COUNT, "the odd server was never hedged"
            got.append(batch_bytes(pipe.run()))
        assert odd_worker().suspect

        def all_taken_from_the_holder() -> bool:
            with fan.cond:
                return not odd_worker().outstanding
        wait_for(all_taken_from_the_holder, "the holder to compute the hedged indices")
        proxy.answers.set()  # ... and the held copies arrive late and are compared
        wait_for(lambda: fan.mismatches > before[0], "the late copies to be compared")
        while len(got) < COUNT:
            got.append(batch_bytes(pipe.run()))
        mismatches = fan.mismatches
        assert mismatches <= fan.reruns
    logged = [r for r in caplog.records if "computed other bytes" in r.getMessage()]
    assert len(logged) == mismatches
    assert all(proxy.address in r.getMessage() for r in logged)
    compared = [int(cast(tuple[Any, ...], r.args)[2]) for r in logged]
    # The copies compared were the odd server's, late; the trainer kept the first to
    # arrive: the holder's.
    assert compared and all(got[i] == honest[i] for i in compared)
    # Each index once, in order: one server's copy or the other's. Where nothing was
    # hedged nothing is compared: the odd server's bytes reached the trainer unchecked.
    assert len(got) == COUNT
    assert all(g in (h, o) for g, h, o in zip(got, honest, other, strict=True))
    assert any(g == o for g, o in zip(got, other, strict=True))
