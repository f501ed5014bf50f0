"""A real server with an object storage data root (``--data-root s3://BUCKET/PREFIX``)
over a real S3 server (SeaweedFS): its pipelines stream the same batches as from a folder
holding the same files, a restore on a second server reads the same objects, and what lies
outside its roots or cannot be read is a clear status; its metrics count the requests and
no credential reaches its log. The same with ``gs://`` and ``az://`` roots, over
fake-gcs-server and Azurite, configured through the environment alone."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import errors
from conveyor_server import Pipeline
from tests.engine.test_object_storage import raw
from tests.support.azurite import KEY, AzuriteProcess
from tests.support.fake_gcs import FakeGcsProcess
from tests.support.images import make_image_folder
from tests.support.resume import batch_bytes, run_batches
from tests.support.seaweed import WeedProcess
from tests.support.servers import Start, client


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[WeedProcess]:
    with WeedProcess(tmp_path / "weed").start() as proc:
        proc.create_bucket("data")
        yield proc


def test_servers_stream_and_restore_from_an_s3_root(start_server: Start, weed: WeedProcess,
                                                     tmp_path: Path) -> None:
    local = make_image_folder(tmp_path / "local" / "train", counts=(3, 3))
    weed.upload_tree("data", local, "sets/train")
    env = weed.env() | {"CONVEYOR_OBJECT_STORAGE_ALLOW_HTTP": "true"}
    a = start_server(roots=["s3://data/sets"], env=env, metrics=True)
    b = start_server(roots=["s3://data/sets"], env=env)
    spec = raw(file_root="s3://data/sets/train", random_shuffle=True)
    with Pipeline(raw(file_root=str(local), random_shuffle=True)) as folder:
        expected = [batch_bytes(batch) for batch in run_batches(folder, 3)]
    with client(a) as ca, client(b) as cb:
        pipe = ca.create("objects", spec)
        assert batch_bytes(pipe.run()) == expected[0]
        checkpoint = pipe.checkpoint()
        restored = cb.restore("objects", checkpoint=checkpoint.id)
        assert [batch_bytes(restored.run()) for _ in range(2)] == expected[1:]
        with pytest.raises(errors.PermissionDenied, match=r"'s3://data/other/x' is outside "
                           "the data roots"):
            ca.create("outside", raw(file_root="s3://data/other/x"))
        with pytest.raises(errors.PermissionDenied, match=r"files\[0\] 's3://other-bucket/"
                           r"sets/x.jpg' is outside the data roots"):  # never looked up
            ca.create("otherbucket", raw(files=["s3://other-bucket/sets/x.jpg"]))
        with pytest.raises(errors.InvalidArgument, match=r"no object has a key below "
                           "sets/missing/"):
            ca.create("missing", raw(file_root="s3://data/sets/missing"))
    metrics = urllib.request.urlopen(a.metrics_url, timeout=10).read().decode()
    assert 'conveyor_object_requests_total{kind="list",outcome="ok"}' in metrics
    fetched = next(line for line in metrics.splitlines()
                   if line.startswith("conveyor_object_bytes_fetched_total"))
    assert float(fetched.split()[1]) > 0
    for server in (a, b):
        assert "s3://data/sets" in server.log()  # the roots are logged ...
        assert weed.env()["AWS_SECRET_ACCESS_KEY"] not in server.log()  # ... no secret


def test_plain_http_is_refused_unless_allowed(start_server: Start, weed: WeedProcess) -> None:
    server = start_server(roots=["s3://data"], env=weed.env())
    with client(server) as c, pytest.raises(
            errors.InvalidArgument, match=r"bucket 'data': its endpoint 'http://127.0.0.1:\d+' "
            r"is plain http.*set allow_http: true in object_storage"):
        c.create("plain", raw(file_root="s3://data/train"))


def test_servers_stream_and_restore_from_gcs_and_azure_roots(start_server: Start,
                                                             tmp_path: Path) -> None:
    """One server reading a GCS bucket and an Azure container: its service account key
    file and its account key in its environment, the plain http of both emulators allowed
    by its configuration's variables; a restore on a second server."""
    local = make_image_folder(tmp_path / "local" / "train", counts=(3, 3))
    gcs = FakeGcsProcess(tmp_path / "gcs").start()
    azurite = AzuriteProcess(tmp_path / "azurite").start()
    try:
        gcs.create_bucket("data")
        gcs.upload_tree("data", local, "sets/train")
        azurite.create_container("data")
        azurite.upload_tree("data", local, "sets/train")
        env = gcs.env() | azurite.account_env() | {
            "CONVEYOR_OBJECT_STORAGE_GCS_ALLOW_HTTP": "true",
            "CONVEYOR_OBJECT_STORAGE_AZURE_ENDPOINT": azurite.endpoint,
            "CONVEYOR_OBJECT_STORAGE_AZURE_ALLOW_HTTP": "true"}
        roots = ["gs://data/sets", "az://data/sets"]
        a = start_server(roots=roots, env=env)
        b = start_server(roots=roots, env=env)
        with Pipeline(raw(file_root=str(local), random_shuffle=True)) as folder:
            expected = [batch_bytes(batch) for batch in run_batches(folder, 3)]
        with client(a) as ca, client(b) as cb:
            for scheme in ("gs", "az"):
                pipe = ca.create(scheme, raw(file_root=f"{scheme}://data/sets/train",
                                             random_shuffle=True))
                assert batch_bytes(pipe.run()) == expected[0]
                restored = cb.restore(scheme, checkpoint=pipe.checkpoint().id)
                assert [batch_bytes(restored.run()) for _ in range(2)] == expected[1:]
            with pytest.raises(errors.PermissionDenied, match=r"'gs://data/other/x' is outside "
                               "the data roots"):
                ca.create("outside", raw(file_root="gs://data/other/x"))
            with pytest.raises(errors.DataFileError, match=r"\(container 'data', key "
                               r"'sets/train/nope.jpg'\): no such key"):
                cb.create("nokey", raw(files=["az://data/sets/train/nope.jpg"]))
        for server in (a, b):
            assert "gs://data/sets" in server.log() and "az://data/sets" in server.log()
            assert KEY not in server.log()
    finally:
        gcs.kill()
        azurite.kill()
