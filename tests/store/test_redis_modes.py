"""Each Redis mode against a real redis-server: TLS with a certificate made here (client
certificates required), a single-node Redis Cluster, a master watched by one Sentinel.
First the store's whole contract, then two servers configured from a YAML file resuming a
pipeline through that Redis."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

import conveyor
from conveyor.errors import AlreadyExists, Fenced, NotFound, Unavailable
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.connect import RedisConfig, TlsConfig, connect
from conveyor_server.store.store import Store
from tests.support.redis_modes import STARTERS, ModeUnsupported, RedisMode
from tests.support.resume import batch_bytes
from tests.support.servers import ServerProcess


@pytest.fixture(params=sorted(STARTERS))
def mode(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisMode]:
    try:
        started = STARTERS[request.param](tmp_path)
    except ModeUnsupported as exc:
        pytest.skip(str(exc))
    try:
        yield started
    finally:
        started.stop()


def test_store_contract(mode: RedisMode) -> None:
    store = Store(connect(mode.config), timeout=2)
    assert store.ping()
    name = f"p-{mode.name}"
    gen = store.create(name, "a:1", "inst-a", "f" * 64, keep=2)
    with pytest.raises(AlreadyExists, match="held by server a:1"):
        store.create(name, "b:1", "inst-b", "f" * 64, keep=2)
    written = [store.write_checkpoint(name, "inst-a", gen, f"blob{i}".encode(), i, "a:1")
               for i in range(3)]
    assert [c.id for c in store.list_checkpoints(name)] == [c.id for c in written[1:]]
    assert store.read_checkpoint(written[2].id).blob == b"blob2"
    with pytest.raises(NotFound, match="retired"):
        store.read_checkpoint(written[0].id)
    gen_b, previous = store.take_over(name, "b:1", "inst-b", "f" * 64, keep=2)
    assert (gen_b, previous) == (gen + 1, "a:1")
    with pytest.raises(Fenced, match="b:1"):
        store.write_checkpoint(name, "inst-a", gen, b"late", 9, "a:1")
    assert store.names() == [name]
    owner = store.owners([name])[name]
    assert owner is not None and owner.holder == "b:1" and owner.latest == 3
    store.release(name, "inst-b", keep_checkpoints=False)
    assert store.names() == []
    with pytest.raises(NotFound):
        store.read_checkpoint(written[2].id)
    store.close()


def _config_file(path: Path, redis_cfg: RedisConfig, data_root: Path) -> Path:
    tls = redis_cfg.tls
    doc = {
        "listen": "127.0.0.1:0",
        "data_roots": [str(data_root)],
        "redis": {"url": redis_cfg.url, "mode": redis_cfg.mode,
                  "sentinels": list(redis_cfg.sentinels), "master_name": redis_cfg.master_name,
                  "tls": {"ca_file": tls.ca_file, "cert_file": tls.cert_file,
                          "key_file": tls.key_file},
                  "timeout_s": 2.0},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_two_servers_resume_through_each_mode(mode: RedisMode, image_root: Path,
                                              tmp_path: Path) -> None:
    config = _config_file(tmp_path / "server.yaml", mode.config, image_root)
    servers = [ServerProcess(None, [], tmp_path, "--config", str(config)).start()
               for _ in range(2)]
    try:
        spec = rotate_pipeline(str(image_root / "imgs"))
        with conveyor.Client(servers[0].address, timeout=20, place=False) as a, \
                conveyor.Client(servers[1].address, timeout=20, place=False) as b:
            pipe = a.create("modes", spec)
            pipe.run()
            ckpt = pipe.checkpoint()
            expected = pipe.run()
            restored = b.restore("modes", ckpt.id)
            assert batch_bytes(restored.run()) == batch_bytes(expected)
            assert b.pipeline("modes").holder == servers[1].address
            # Refused by the fencing watcher or by the write script, whichever comes first;
            # either names the new holder.
            with pytest.raises(conveyor.errors.FailedPrecondition,
                               match=re.escape(servers[1].address)):
                a.checkpoint("modes")
            images = expected[0]
            assert all(isinstance(x, np.ndarray) for x in images)
    finally:
        for server in servers:
            server.stop()


def test_tls_without_a_client_certificate_is_refused_clearly(tmp_path: Path) -> None:
    try:
        started = STARTERS["tls"](tmp_path)
    except ModeUnsupported as exc:
        pytest.skip(str(exc))
    try:
        assert started.config.url is not None
        no_client_cert = RedisConfig(url=started.config.url,
                                     tls=TlsConfig(ca_file=started.config.tls.ca_file))
        store = Store(connect(no_client_cert), timeout=1)
        with pytest.raises(Unavailable, match=r"rediss://127\.0\.0\.1:\d+/0"):
            store.ping()
    finally:
        started.stop()
