"""The server's configuration: file, environment and flags; refusals that name the key;
limits; pipelines created at start-up before health says SERVING."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import json_format, text_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import conveyor
from conveyor import errors
from conveyor.transport.channel import wait_serving
from conveyor.transport.credentials import TlsOptions
from conveyor_server import Pipeline
from conveyor_server.app import config as configuration
from conveyor_server.app import config_loading
from conveyor_server.app.main import load_config
from conveyor_server.app.startup import load_spec
from conveyor_server.demo.launch import (
    read_health_address,
    read_metrics_address,
    spawn_server,
    stop_server,
)
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.store.connect import connect
from conveyor_server.store.redis_process import RedisProcess
from tests.support.certs import CertificateAuthority
from tests.support.resume import batch_bytes, run_batches
from tests.support.servers import ServerProcess


def write(path: Path, doc: object) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    cfg_path = write(tmp_path / "s.yaml", {
        "listen": "127.0.0.1:7000", "data_roots": [str(tmp_path)],
        "redis": {"url": "redis://file:6379/0", "timeout_s": 2},
        "limits": {"max_pipelines": 3, "max_batch_bytes": 100}})
    env = {"CONVEYOR_LIMITS_MAX_PIPELINES": "5", "CONVEYOR_REDIS_URL": "redis://env:6379/1",
           "CONVEYOR_REDIS_PORT": "tcp://10.0.0.1:6379",  # set by Kubernetes: not a key
           "CONVEYOR_TOKEN": "s3cret"}
    cfg = config_loading.load(cfg_path, env, {"limits.max_pipelines": 7})
    assert cfg.listen == "127.0.0.1:7000" and cfg.redis.timeout_s == 2.0
    assert cfg.redis.url == "redis://env:6379/1"
    assert cfg.limits.max_pipelines == 7 and cfg.limits.max_batch_bytes == 100
    assert cfg.auth.token == "s3cret" and cfg.data_roots == (str(tmp_path),)
    assert config_loading.load(None, {}).limits == configuration.LimitsConfig()


def test_every_key_has_its_environment_variable(tmp_path: Path) -> None:
    leaves = configuration.leaf_paths()
    assert {"redis.tls.ca_file", "limits.max_image_pixels", "metrics.listen"} <= set(leaves)
    env = {configuration.env_name("redis.sentinels"): "a:1, b:2",
           configuration.env_name("redis.mode"): "Sentinel",
           configuration.env_name("advertise"): "",
           configuration.env_name("drain.grace_s"): "2.5",
           "CONVEYOR_ALLOCATOR_TUNE": "false"}
    cfg = config_loading.load(None, env)
    assert cfg.redis.sentinels == ("a:1", "b:2") and cfg.redis.mode == "sentinel"
    assert cfg.advertise is None and cfg.drain.grace_s == 2.5
    assert cfg.allocator.tune is False and config_loading.load(None, {}).allocator.tune


@pytest.mark.parametrize(("doc", "env", "message"), [
    ({"redis": {"urll": "x"}}, {}, r"redis\.urll: unknown key in .*s\.yaml"),
    ({"listn": "x"}, {}, r"^listn: unknown key"),
    ({"allocator": {"mmap_threshold_bytes": 1 << 30}}, {},
     r"allocator\.mmap_threshold_bytes: must be at most 33554432"),
    ({"limits": {"max_pipelines": "many"}}, {},
     r"limits\.max_pipelines: expected an integer, got 'many' \(from .*s\.yaml\)"),
    ({}, {"CONVEYOR_LIMITS_MAX_PIPELINES": "0"},
     r"limits\.max_pipelines: must be at least 1, got '0' \(from environment variable "
     r"CONVEYOR_LIMITS_MAX_PIPELINES\)"),
    ({"redis": {"mode": "clustr"}}, {}, r"redis\.mode: expected one of standalone, sentinel"),
    ({"data_roots": "/data"}, {}, r"data_roots: expected a list of strings"),
    ({"redis": "redis://x"}, {}, r"redis: expected a mapping"),
    ({"pipelines": [{"name": "a"}]}, {}, r"pipelines\[0\]: give exactly one of spec_file"),
    ({"pipelines": [{"name": "a", "spec": {}}, {"name": "a", "spec": {}}]}, {},
     r"pipelines\[1\]\.name: 'a' appears twice"),
    ({"pipelines": [{"spec": {}}]}, {}, r"pipelines\[0\]\.name: required"),
    ({"log": {"format": "xml"}}, {}, r"log\.format: expected one of json, text"),
    ({}, {"CONVEYOR_AUTH_TOKEN": ""}, r"auth\.token: set, but empty \(from environment"),
    ({"auth": {"token": " "}}, {}, r"auth\.token: set, but empty"),
    ({}, {"CONVEYOR_DRAIN_GRACE_S": "nan"}, r"drain\.grace_s: expected a finite number"),
    ({"redis": {"timeout_s": float("inf")}}, {}, r"redis\.timeout_s: expected a finite"),
    ({"pipelines": [{"name": "a", "spec": {}, "keep_checkpoints": -5}]}, {},
     r"pipelines\[0\]\.keep_checkpoints: must be at least 1"),
])
def test_bad_configuration_names_the_key(tmp_path: Path, doc: dict[str, object],
                                         env: dict[str, str], message: str) -> None:
    with pytest.raises(configuration.ConfigError, match=message):
        config_loading.load(write(tmp_path / "s.yaml", doc), env)


def test_the_canonical_variable_wins_over_its_old_alias() -> None:
    env = {"CONVEYOR_TOKEN": "old", "CONVEYOR_AUTH_TOKEN": "new"}
    assert config_loading.load(None, env).auth.token == "new"
    assert config_loading.load(None, {"CONVEYOR_TOKEN": "old"}).auth.token == "old"


def test_malformed_files_and_urls_are_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"listen: \xff\xfe\n")
    with pytest.raises(configuration.ConfigError, match="not UTF-8"):
        config_loading.load(path)
    for url in ("redis://h:abc/0", "redis://h:99999/0"):
        with pytest.raises(errors.InvalidArgument, match="redis.url"):
            connect(configuration.RedisConfig(url=url))
    with pytest.raises(errors.Unavailable, match="unreachable"):
        connect(configuration.RedisConfig(url="redis://127.0.0.1:1/0", mode="cluster",
                                          timeout_s=0.5))


def test_bad_yaml_says_where(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("listen: [\n")
    with pytest.raises(configuration.ConfigError, match=r"not valid YAML at line 2"):
        config_loading.load(path)


def test_checks_beyond_types(tmp_path: Path) -> None:
    with pytest.raises(configuration.ConfigError, match=r"data_roots\[0\]: '/nope' is not a"):
        load_config(["--data-root", "/nope"], env={})
    with pytest.raises(configuration.ConfigError, match=r"metrics\.listen: '9464' is not"):
        load_config(["--data-root", str(tmp_path), "--metrics-listen", "9464"], env={})
    cfg = load_config(["--data-root", str(tmp_path), "--port", "0", "--host", "127.0.0.1"],
                      env={})
    assert cfg.listen == "127.0.0.1:0"


def test_object_storage_roots_and_settings_of_each_store(tmp_path: Path) -> None:
    """gs:// and az:// roots as s3:// ones; object_storage.gcs and .azure from the file and
    the environment, as the engine's settings; a misspelled root refused naming its fix."""
    from conveyor_server.app.object_storage import object_store_settings
    from conveyor_server.engine.data.object_clients import StoreSettings

    cfg = load_config(["--config", str(write(tmp_path / "s.yaml", {
        "data_roots": ["gs://train-sets/imagenet", "az://datasets", "s3://data"],
        "object_storage": {"gcs": {"endpoint": "https://storage.private.example"}}}))],
        env={"CONVEYOR_OBJECT_STORAGE_AZURE_ENDPOINT": "http://127.0.0.1:10000/devstoreaccount1",
             "CONVEYOR_OBJECT_STORAGE_AZURE_ALLOW_HTTP": "true"})
    settings = object_store_settings(cfg.object_storage)
    assert settings.gcs == StoreSettings("https://storage.private.example", False)
    assert settings.azure == StoreSettings("http://127.0.0.1:10000/devstoreaccount1", True)
    for root, message in (("abfss://datasets@acct.dfs.core.windows.net/train",
                           r"data_roots\[0\] .*: write az://datasets/train"),
                          ("az://Data", r"data_roots\[0\] 'az://Data': 'Data' is not a "
                                        "container name of Azure Blob Storage")):
        with pytest.raises(configuration.ConfigError, match=message):
            load_config(["--data-root", root], env={})


def test_the_data_port_from_flags_and_the_environment(tmp_path: Path) -> None:
    from conveyor_server.app.main import data_port_settings

    base = ["--data-root", str(tmp_path), "--listen", "127.0.0.1:50051"]
    cfg = load_config(base, env={})
    assert cfg.data_channel.enabled and cfg.data_channel.port == 0
    settings = data_port_settings(cfg)
    assert settings is not None and (settings.host, settings.port) == ("127.0.0.1", 0)
    cfg = load_config([*base, "--data-port", "50053"],
                      env={"CONVEYOR_DATA_CHANNEL_HANDSHAKE_S": "2.5"})
    settings = data_port_settings(cfg)
    assert settings is not None and settings.port == 50053 and settings.handshake_s == 2.5
    assert data_port_settings(load_config([*base, "--no-data-channel"], env={})) is None
    assert data_port_settings(load_config(
        base, env={"CONVEYOR_DATA_CHANNEL_ENABLED": "false"})) is None
    with pytest.raises(configuration.ConfigError, match=r"data_channel\.port"):
        load_config([*base, "--data-port", "70000"], env={})


def test_server_refuses_a_bad_file_at_start(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", {"data_roots": [str(tmp_path)],
                                       "limits": {"max_batch_bytes": -1}})
    proc = subprocess.run([sys.executable, "-m", "conveyor_server.app.main", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "limits.max_batch_bytes: must be at least 1, got -1" in proc.stderr


# -- limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "refusal"), [
    # Each sample fits, the batch does not: refused once the batch is made.
    (50_000, r"batch 0 is [\d,]+ bytes, above .*max_batch_bytes = 50,000"),
    # One sample does not fit: refused before that sample's output is allocated.
    (1000, r"rotate \(op 3\) on '.*\.jpg': its output would be \d+x\d+x3 uint8 = [\d,]+ "
           r"bytes, above .*max_batch_bytes = 1,000"),
])
def test_batch_bytes_limit_refuses_and_loses_nothing(image_root: Path, limit: int,
                                                     refusal: str) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"))
    with Pipeline(spec) as free:
        expected = run_batches(free, 2)
    with Pipeline(spec, limits=EngineLimits(max_batch_bytes=limit)) as limited:
        with pytest.raises(errors.ResourceExhausted, match=refusal):
            limited.run()
        assert limited.batches_returned == 0
        blob = limited.checkpoint()
    with Pipeline(spec, checkpoint=blob) as resumed:
        assert batch_bytes(resumed.run()) == batch_bytes(expected[0])


def test_image_pixels_limit_names_the_file(image_root: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs"))
    with Pipeline(spec, limits=EngineLimits(max_image_pixels=1000)) as limited, \
            pytest.raises(errors.ResourceExhausted,
                          match=r"decoders\.image \(op 1\) on '.*\.jpg': the JPEG image is "
                                r"\d+x\d+ = [\d,]+ pixels, above .*max_image_pixels = 1,000"):
        limited.run()
    with Pipeline(spec, limits=EngineLimits(max_image_pixels=100_000)) as roomy:
        roomy.run()


def test_limits_over_the_service(redis_proc: RedisProcess, image_root: Path,
                                 tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", {"limits": {"max_batch_bytes": 1000}})
    server = ServerProcess(redis_proc.url, [image_root], tmp_path, "--config", str(path)).start()
    try:
        with conveyor.Client(server.address, timeout=20) as c:
            pipe = c.create("big", rotate_pipeline(str(image_root / "imgs")))
            with pytest.raises(errors.ResourceExhausted, match="limits.max_batch_bytes"):
                pipe.run()
            assert c.checkpoint("big").batches == 0
    finally:
        server.stop()


# -- pipelines from the configuration ----------------------------------------------------


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="conveyor.v1.Conveyor"), timeout=5)
        return int(reply.status)


def test_pipelines_from_the_configuration(redis_proc: RedisProcess, image_root: Path,
                                          tmp_path: Path) -> None:
    spec = rotate_pipeline(str(image_root / "imgs")).spec
    (tmp_path / "b.txtpb").write_text(text_format.MessageToString(spec))
    path = write(tmp_path / "s.yaml", {"pipelines": [
        {"name": "a", "spec": json_format.MessageToDict(spec)},
        {"name": "b", "spec_file": "b.txtpb", "if_exists": "restore"},
    ]})
    first = ServerProcess(redis_proc.url, [image_root], tmp_path, "--config", str(path)).start()
    try:
        assert health(first.address) == health_pb2.HealthCheckResponse.SERVING
        with conveyor.Client(first.address, timeout=20) as c:
            assert sorted(p.name for p in c.pipelines()) == ["a", "b"]
            b = c.attach("b")
            b.run()
            ckpt = b.checkpoint()
            expected = b.run()
    finally:
        first.kill()  # a crash: the names stay claimed by the dead server
        first.stop()
    second = ServerProcess(redis_proc.url, [image_root], tmp_path, "--config", str(path)).start()
    try:
        with conveyor.Client(second.address, timeout=20) as c:
            # "a" (if_exists: skip) is left to the dead holder; "b" was taken over.
            assert c.pipeline("a").holder == first.address
            assert c.pipeline("b").holder == second.address
            resumed = c.attach("b")
            assert resumed.consumed == ckpt.batches
            assert batch_bytes(resumed.run()) == batch_bytes(expected)
    finally:
        second.stop()


def test_a_bad_spec_file_is_refused_before_listening(image_root: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"batch_size": "eight"}')
    path = write(tmp_path / "s.yaml", {"data_roots": [str(image_root)], "pipelines": [
        {"name": "bad", "spec_file": "bad.json"}]})
    proc = subprocess.run([sys.executable, "-m", "conveyor_server.app.main", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "pipelines[0].spec_file" in proc.stderr and "bad.json" in proc.stderr
    assert "listening" not in proc.stdout


def test_the_example_configuration_serves_tls_tokens_health_and_metrics(
        redis_proc: RedisProcess, image_root: Path, tmp_path: Path) -> None:
    """deploy/base/server.yaml as the Deployment uses it, with the environment pointing it
    at this test's Redis, data, certificate and tokens files, as a pod's mounts would."""
    example = Path(__file__).resolve().parents[2] / "deploy" / "base" / "server.yaml"
    ca = CertificateAuthority()
    cert, key = ca.issue("127.0.0.1").write(tmp_path / "tls.crt", tmp_path / "tls.key")
    tls = TlsOptions(ca_file=str(ca.write(tmp_path / "ca.crt")))
    (tmp_path / "tokens.yaml").write_text("team-a: team-a-token-0123456789\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env |= {"CONVEYOR_LISTEN": "127.0.0.1:0", "CONVEYOR_REDIS_URL": redis_proc.url,
            "CONVEYOR_DATA_ROOTS": str(image_root), "CONVEYOR_METRICS_LISTEN": "127.0.0.1:0",
            "CONVEYOR_HEALTH_LISTEN": "127.0.0.1:0", "CONVEYOR_ADVERTISE": "10.1.2.3:50051",
            "CONVEYOR_TLS_CERT_FILE": str(cert), "CONVEYOR_TLS_KEY_FILE": str(key),
            "CONVEYOR_AUTH_TOKENS_FILE": str(tmp_path / "tokens.yaml"),
            "GRPC_VERBOSITY": "ERROR"}  # as the image sets it (Dockerfile)
    with (tmp_path / "server.log").open("w") as log:
        proc, address = spawn_server(["--config", str(example)], stderr=log, env=env)
    try:
        metrics_port = int(read_metrics_address(proc, 30).rsplit(":", 1)[1])
        health_address = read_health_address(proc, 30)
        wait_serving(address, 30, tls=tls)
        assert health(health_address) == health_pb2.HealthCheckResponse.SERVING  # plaintext
        with pytest.raises(grpc.RpcError):
            health(address)  # the gRPC port is TLS only
        with grpc.secure_channel(address, tls.credentials()) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            with pytest.raises(grpc.RpcError) as reflection:
                list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        assert reflection.value.code() == grpc.StatusCode.UNIMPLEMENTED  # off in the example
        with conveyor.Client(address, timeout=20, tls=tls) as anonymous, \
                pytest.raises(errors.Unauthenticated):
            anonymous.pipelines()
        with conveyor.Client(address, timeout=20, tls=tls,
                             token="team-a-token-0123456789") as c:
            c.create("example", rotate_pipeline(str(image_root / "imgs")))
            assert c.pipeline("example").holder == "10.1.2.3:50051"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=10) as reply:
            text = reply.read().decode()
        assert 'conveyor_rpcs_total{code="OK",method="CreatePipeline"} 1.0' in text
        assert 'conveyor_rpcs_total{code="UNAUTHENTICATED",method="ListPipelines"} 1.0' in text
        assert "conveyor_build_info{" in text
    finally:
        stop_server(proc)
    # The example logs JSON: every line of its log is one object.
    lines = (tmp_path / "server.log").read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)


def test_cli_exports_a_spec_the_configuration_takes(image_root: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from conveyor.cli import main as cli

    (tmp_path / "my_pipelines.py").write_text(
        "from conveyor_server.demo.run import rotate_pipeline\n\n"
        "def train(root):\n    return rotate_pipeline(root)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = str(image_root / "imgs")
    assert cli(["spec", "my_pipelines:train", root]) == 0
    (tmp_path / "train.json").write_text(capsys.readouterr().out)
    entry = configuration.PipelineEntry(name="train", spec_file=str(tmp_path / "train.json"))
    assert load_spec(entry, 0) == rotate_pipeline(root).spec
    assert cli(["spec", "my_pipelines:nothing"]) == 1
    assert "cannot load my_pipelines:nothing" in capsys.readouterr().err
    assert cli(["spec", "my_pipelines:train"]) == 1  # missing argument
    assert "my_pipelines:train() failed: TypeError" in capsys.readouterr().err


def test_a_failed_start_releases_the_names_it_created(
        redis_proc: RedisProcess, image_root: Path, tmp_path: Path) -> None:
    spec = json_format.MessageToDict(rotate_pipeline(str(image_root / "imgs")).spec)
    first = ServerProcess(redis_proc.url, [image_root], tmp_path).start()
    try:
        with conveyor.Client(first.address, timeout=20) as c:
            c.create("taken", rotate_pipeline(str(image_root / "imgs")))
            path = write(tmp_path / "s.yaml", {"pipelines": [
                {"name": "fresh", "spec": spec},
                {"name": "taken", "spec": spec, "if_exists": "fail"}]})
            proc = subprocess.run(
                [sys.executable, "-m", "conveyor_server.app.main", "--config", str(path),
                 "--host", "127.0.0.1", "--port", "0", "--redis-url", redis_proc.url,
                 "--data-root", str(image_root)],
                capture_output=True, text=True, timeout=60, check=False)
            assert proc.returncode == 2, proc.stderr
            assert "'taken'" in proc.stderr and "if_exists: fail" in proc.stderr
            with pytest.raises(errors.NotFound):
                c.pipeline("fresh")  # created, then released when the start failed
            assert c.pipeline("taken").holder == first.address
    finally:
        first.stop()
