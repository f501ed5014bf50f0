"""Error texts that tell a newcomer what happened and what to do next, asserted so they stay
true: a checkpoint id no server wrote against one whose number was reused, retired or lost;
a data path that does not exist against one outside the data roots."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.data.file_list import resolve
from conveyor_server.store.ids import parse_checkpoint_id, written_by_a_server
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store
from tests.support.servers import Start, client

LISTED = "`conveyor checkpoints p` lists the ones kept"


def _read_error(store: Store, cid: str) -> str:
    with pytest.raises(errors.NotFound) as raised:
        store.read_checkpoint(cid)
    return raised.value.message


def test_every_id_a_server_writes_passes_its_check_and_a_changed_digit_does_not(
        redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=0)
    for n in range(20):
        cid = store.write_checkpoint("p", "i", gen, b"blob", n, "a:1").id
        name, seq, nonce = parse_checkpoint_id(cid)
        assert written_by_a_server(name, seq, nonce), cid
        for at in (0, 11, 12, 15):  # a random digit, a check digit
            typo = nonce[:at] + ("0" if nonce[at] != "0" else "1") + nonce[at + 1:]
            assert not written_by_a_server(name, seq, typo), (cid, typo)
        assert not written_by_a_server(name, seq + 1, nonce)
        assert not written_by_a_server("q", seq, nonce)


def test_a_made_up_id_is_no_such_checkpoint_and_a_real_one_says_what_became_of_it(
        redis_proc: RedisProcess, redis_client: redis.Redis) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=2)
    first = store.write_checkpoint("p", "i", gen, b"1", 1, "a:1")
    store.write_checkpoint("p", "i", gen, b"2", 2, "a:1")
    store.write_checkpoint("p", "i", gen, b"3", 3, "a:1")  # retires the first (keep=2)
    # Made up, at a number that holds a checkpoint, and beyond the last one written.
    for made_up in ("p:2-0123456789abcdef", "p:9-0123456789abcdef"):
        assert _read_error(store, made_up) == (
            f"no such checkpoint: {made_up!r} is not an id a server wrote (mistyped?); "
            f"{LISTED}")
    assert _read_error(store, first.id) == (
        f"checkpoint {first.id!r} no longer exists: retired by retention (keep_checkpoints) "
        f"or deleted with its pipeline; {LISTED}")
    # A failover loses the last write: the counter comes back, then the number is reused.
    lost = store.write_checkpoint("p", "i", gen, b"4", 4, "a:1")
    redis_client.set("conveyor:{p}:seq", 3)
    redis_client.delete("conveyor:{p}:ckpt:4")
    redis_client.zrem("conveyor:{p}:ckpts", 4)
    assert _read_error(store, lost.id) == (
        f"checkpoint {lost.id!r} does not exist: 'p' has no checkpoint numbered 4 (never "
        f"written, or lost in a Redis failover); {LISTED}")
    store.write_checkpoint("p", "i", gen, b"4 again", 4, "a:1")
    assert _read_error(store, lost.id) == (
        f"checkpoint {lost.id!r} no longer exists: its number was reused by a later "
        "checkpoint of 'p' (a Redis failover lost the write, or an older server numbered a "
        f"re-created pipeline anew); {LISTED}")


def test_a_missing_data_path_does_not_exist_and_one_outside_names_the_data_roots(
        start_server: Start, image_root: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "imgs").mkdir(parents=True)
    (data / "imgs" / "list.txt").write_text("")
    server = start_server(roots=[data])  # its only data root, "<root 0>"
    with client(server) as c:
        def refusal(file_root: str) -> errors.ConveyorError:
            with pytest.raises(errors.ConveyorError) as raised:
                c.create("typo", rotate_pipeline(file_root, batch_size=2))
            return raised.value

        missing = refusal(str(data / "imgz"))
        assert isinstance(missing, errors.InvalidArgument)
        assert missing.message == ("readers.file: file_root '<root 0>/imgz' does not exist: "
                                   "check the path")
        flat = refusal(str(data / "imgs" / "list.txt"))
        assert flat.message == "readers.file: file_root '<root 0>/imgs/list.txt' is not a " \
                               "directory"
        typo = str(tmp_path / "dta" / "imgs")
        for outside in (typo, str(image_root / "imgs")):  # absent, present: told alike
            refused = refusal(outside)
            assert isinstance(refused, errors.PermissionDenied)
            assert refused.message == (
                f"readers.file: file_root {outside!r} is outside the data roots, the only "
                "folders this server reads: check the path for a typo (a relative path is "
                "resolved in the server's working directory), or make a folder above it a "
                "data root (the server's --data-root, data_roots in its configuration)")


def test_a_missing_file_list_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgument) as raised:
        resolve({"file_list": str(tmp_path / "lsit.txt")}, [tmp_path])
    assert raised.value.message == ("readers.file: file_list '<root 0>/lsit.txt' does not "
                                    "exist: check the path")
