"""The authorisation matrix against one real server with a tokens file: who calls (no
token, a wrong token, the creator, another identity, an operator) against what it does
(create, describe, list, stream, checkpoint, restore, delete). Every cell is what the
security page (docs/operations/security.md) documents; a refused cell leaves the creator's
pipeline as it was, and its message names neither a token nor the creator."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import conveyor
from conveyor import errors
from conveyor.v1 import pipeline_pb2, service_pb2
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.support.servers import ServerProcess

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789",
          "ops": "ops-token-0123456789"}
CALLERS = {"no token": None, "wrong token": "not-a-token-of-this-server",
           "creator": TOKENS["alice"], "another identity": TOKENS["bob"],
           "operator": TOKENS["ops"]}
ACTIONS = ("create", "describe", "list", "stream", "checkpoint", "restore", "delete")


def expected(caller: str, action: str) -> str:
    """The documented outcome: "ok", "hidden" (listed without the creator's pipelines),
    or the error class's name."""
    if caller in ("no token", "wrong token"):
        return "Unauthenticated"
    if caller == "another identity" and action == "list":
        return "hidden"
    if caller == "another identity" and action != "create":
        return "PermissionDenied"
    return "ok"


@dataclass
class Secured:
    server: ServerProcess
    spec: pipeline_pb2.PipelineSpec

    def client(self, token: str | None) -> conveyor.Client:
        return conveyor.Client(self.server.address, token=token, timeout=20,
                               stream_timeout=60, failover=False, tls=False)


@pytest.fixture(scope="module")
def secured(image_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    folder = tmp_path_factory.mktemp("authorization")
    (folder / "tokens.yaml").write_text(yaml.safe_dump(TOKENS))
    (folder / "server.yaml").write_text(yaml.safe_dump({
        "auth": {"tokens_file": str(folder / "tokens.yaml"), "operators": ["ops"]},
        "limits": {"max_pipelines": 256}}))
    redis = RedisProcess(folder / "redis", appendonly=True).start()
    server = ServerProcess(redis.url, [image_root], folder, "--config",
                           str(folder / "server.yaml"))
    try:
        yield Secured(server.start(), rotate_pipeline(str(image_root / "imgs")).spec)
    finally:
        server.stop()
        redis.cleanup()


def _act(c: conveyor.Client, action: str, name: str, checkpoint_id: str,
         spec: pipeline_pb2.PipelineSpec) -> object:
    if action == "create":
        return c.create(f"{name}-new", spec)
    if action == "describe":
        return c.pipeline(name)
    if action == "list":
        return [p.name for p in c.pipelines()]
    if action == "stream":
        # Straight to StreamBatches (attach() would Describe first).
        pipe = conveyor.RemotePipeline(c, service_pb2.PipelineInfo(name=name, acknowledged=1),
                                       via=c.target)
        try:
            return pipe.run()
        finally:
            pipe.close()
    if action == "checkpoint":
        return c.checkpoint(name)
    if action == "restore":
        return c.restore(name, checkpoint=checkpoint_id)
    assert action == "delete"
    c.delete(name)
    return None


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("caller", list(CALLERS))
def test_authorisation_matrix(secured: Secured, caller: str, action: str) -> None:
    name = f"{caller.replace(' ', '-')}-{action}"
    with secured.client(TOKENS["alice"]) as alice, secured.client(TOKENS["ops"]) as ops, \
            secured.client(CALLERS[caller]) as c:
        pipe = alice.create(name, secured.spec)
        pipe.run()
        checkpoint_id = pipe.checkpoint().id
        pipe.close()
        before = alice.pipeline(name)
        want = expected(caller, action)
        try:
            if want in ("ok", "hidden"):
                outcome = _act(c, action, name, checkpoint_id, secured.spec)
                if action == "list":
                    assert isinstance(outcome, list)
                    assert (name in outcome) == (want == "ok"), outcome
            else:
                with pytest.raises(getattr(errors, want)) as refused:
                    _act(c, action, name, checkpoint_id, secured.spec)
                message = refused.value.message
                assert "alice" not in message and not any(t in message
                                                          for t in TOKENS.values())
                assert refused.value.code == ("UNAUTHENTICATED" if want == "Unauthenticated"
                                              else "PERMISSION_DENIED")
                after = alice.pipeline(name)  # untouched: same holder, same generation
                assert (after.holder, after.generation) == (before.holder, before.generation)
                assert alice.checkpoint(name, consumed=1).batches == 1
            _check_after(alice, c, caller, action, name, want)
        finally:
            for leftover in (name, f"{name}-new"):
                with contextlib.suppress(errors.NotFound):
                    ops.delete(leftover)


def _check_after(alice: conveyor.Client, c: conveyor.Client, caller: str, action: str,
                 name: str, want: str) -> None:
    """What a permitted action changed, seen by the creator."""
    if want != "ok":
        return
    if action == "create":
        created = c.pipeline(f"{name}-new")
        assert created.name == f"{name}-new"
        if caller == "another identity":  # bob's own pipeline is not alice's to see
            with pytest.raises(errors.PermissionDenied):
                alice.pipeline(f"{name}-new")
    elif action == "restore":
        # Restored by the creator or by an operator, it is still the creator's.
        assert alice.pipeline(name).generation >= 2
    elif action == "delete":
        with pytest.raises(errors.NotFound):
            alice.pipeline(name)


def test_checkpoints_stay_their_creators_also_after_a_delete(secured: Secured) -> None:
    with secured.client(TOKENS["alice"]) as alice, secured.client(TOKENS["bob"]) as bob, \
            secured.client(TOKENS["ops"]) as ops:
        pipe = alice.create("kept", secured.spec)
        pipe.run()
        ckpt = pipe.checkpoint()
        pipe.close()
        with pytest.raises(errors.PermissionDenied, match="'bob' may not read checkpoint"):
            bob.get_checkpoint(ckpt.id)
        with pytest.raises(errors.PermissionDenied):
            bob.checkpoints("kept")
        with pytest.raises(errors.PermissionDenied):
            bob.delete("kept", force=True)
        # The creation checkpoint (batch 0) and alice's.
        assert [c.id for c in ops.checkpoints("kept")][-1] == ckpt.id
        assert [c.batches for c in ops.checkpoints("kept")] == [0, 1]
        assert ops.get_checkpoint(ckpt.id).data == ckpt.data
        alice.delete("kept", keep_checkpoints=True)
        # The name is free, but its checkpoints are still alice's: Redis kept the creator.
        with pytest.raises(errors.PermissionDenied, match="may not restore from checkpoint"):
            bob.restore("stolen", checkpoint=ckpt.id)
        with pytest.raises(errors.NotFound):
            bob.checkpoints("kept")  # nothing of it is bob's to see
        ops.restore("kept", checkpoint=ckpt.id)
        assert alice.pipeline("kept").holder == secured.server.address
        with pytest.raises(errors.PermissionDenied):
            bob.pipeline("kept")
        ops.delete("kept")
