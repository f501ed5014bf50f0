"""``gs://`` and ``az://`` through the same readers, fetch-ahead, node cache and errors as
``s3://``, each over a real server on loopback (fake-gcs-server for Google Cloud Storage,
Azurite for Azure Blob Storage), reached through that store's standard environment: the
same batches as from a folder holding the same files and as from S3, a resume on another
pipeline, a changed object refused naming its key, and every bad input a clear error naming
the bucket (or container) and key, never INTERNAL, with no credential in it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conveyor import errors
from conveyor_server import Pipeline
from conveyor_server.engine.data.file_list import resolve
from conveyor_server.engine.data.listings import MemoryListings
from conveyor_server.engine.data.object_clients import (
    BucketSettings,
    ObjectStoreSettings,
    StoreSettings,
)
from conveyor_server.engine.data.object_errors import blank_secrets
from conveyor_server.engine.data.object_store import ObjectStores
from conveyor_server.engine.data.object_urls import parse_object_url
from tests.engine.test_object_cache import Counted
from tests.engine.test_object_storage import batches, raw, sample_bytes
from tests.support.azurite import KEY, AzuriteProcess
from tests.support.fake_gcs import FakeGcsProcess
from tests.support.images import make_image_folder
from tests.support.seaweed import REGION, WeedProcess

#: The environment of one store's credentials and endpoints, cleared before each test.
STORE_ENV = ("AWS_", "GOOGLE_", "AZURE_", "AZURITE_")


@dataclass(frozen=True)
class Place:
    """One store of the test: its scheme, its server, and what its holder is called."""

    scheme: str
    server: FakeGcsProcess | AzuriteProcess

    @property
    def holder(self) -> str:
        return "container" if self.scheme == "az" else "bucket"

    def url(self, key: str = "") -> str:
        return f"{self.scheme}://data/{key}".rstrip("/")

    def env(self) -> dict[str, str]:
        return self.server.env()

    def settings(self, **kw: Any) -> ObjectStoreSettings:
        """What the server's configuration says: plain http to fake-gcs-server (Azurite's
        environment allows it by itself)."""
        if self.scheme == "gs":
            kw.setdefault("gcs", StoreSettings(allow_http=True))
        return ObjectStoreSettings(**kw)

    def stores(self, **kw: Any) -> ObjectStores:
        return ObjectStores(self.settings(**kw))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder data set: classes, a nested folder, a file right below the root, a file
    the filters leave out, a name with a space and a plus."""
    root = tmp_path_factory.mktemp("local")
    train = make_image_folder(root / "train", counts=(3, 2, 4))
    (train / "class_1" / "deeper").mkdir()
    (train / "class_1" / "deeper" / "a b+c.jpg").write_bytes(
        (train / "class_0" / "img_000.jpg").read_bytes())
    (train / "loose.jpg").write_bytes(b"not a sample")
    (train / "class_0" / "notes.txt").write_text("left out by the filters")
    return root


@pytest.fixture(scope="module", params=["gs", "az"])
def place(request: pytest.FixtureRequest, dataset: Path) -> Place:
    """Google Cloud Storage or Azure Blob Storage, holding the data set in ``data/train``."""
    server = request.getfixturevalue("gcs" if request.param == "gs" else "azurite")
    server.upload_tree("data", dataset / "train", "train")
    return Place(request.param, server)


def clear_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(STORE_ENV):
            monkeypatch.delenv(name)


@pytest.fixture
def env(place: Place, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The store's standard environment alone (nothing Conveyor-specific)."""
    clear_store_env(monkeypatch)
    for key, value in place.env().items():
        monkeypatch.setenv(key, value)
    yield


def test_objects_list_and_read_as_the_same_folder_and_as_s3(
        place: Place, dataset: Path, env: None, weed: WeedProcess,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in weed.env().items():
        monkeypatch.setenv(key, value)
    weed.upload_tree("data", dataset / "train", "train")
    local = resolve({"file_root": str(dataset / "train")}, [dataset])
    remote = resolve({"file_root": place.url("train")}, [place.url()], place.stores())
    assert [(e.relative, e.size, e.label) for e in remote] == \
        [(e.relative, e.size, e.label) for e in local]
    assert all(e.etag for e in remote)  # the data identity holds each object's ETag
    spec = dict(random_shuffle=True, shuffle_after_epoch=False)
    s3 = ObjectStores(ObjectStoreSettings(default=BucketSettings(
        endpoint=weed.endpoint, region=REGION, allow_http=True)))
    with Pipeline(raw(file_root=str(dataset / "train"), **spec), data_roots=[dataset]) as a, \
            Pipeline(raw(file_root=place.url("train"), **spec), data_roots=[place.url()],
                     objects=place.stores()) as b, \
            Pipeline(raw(file_root="s3://data/train", **spec), data_roots=["s3://data"],
                     objects=s3) as c:
        expected = batches(a, 7)  # over two epochs
        assert batches(b, 7) == expected
        assert batches(c, 7) == expected


def test_a_resume_on_another_pipeline_reads_the_same_objects(place: Place, env: None) -> None:
    spec = raw(file_root=place.url("train"), random_shuffle=True)
    listings = MemoryListings()
    kw: dict[str, Any] = dict(data_roots=[place.url()], listings=listings)
    with Pipeline(spec, objects=place.stores(), **kw) as first:
        batches(first, 2)
        blob = first.checkpoint()
        expected = batches(first, 3)
    with Pipeline(spec, checkpoint=blob, objects=place.stores(), **kw) as second:
        assert batches(second, 3) == expected


def test_a_restore_over_a_changed_object_is_refused_naming_its_key(
        place: Place, dataset: Path, env: None) -> None:
    place.server.upload_tree("data", dataset / "train", "changing/train")
    spec = raw(file_root=place.url("changing/train"), random_shuffle=True)
    listings = MemoryListings()
    kw: dict[str, Any] = dict(data_roots=[place.url("changing")], listings=listings)
    with Pipeline(spec, objects=place.stores(), **kw) as pipe:
        batches(pipe, 1)
        blob = pipe.checkpoint()
    key = "train/class_0/img_001.jpg"
    data = bytearray((dataset / key).read_bytes())
    data[-3] ^= 0xFF  # the same size, other bytes: only the ETag tells
    place.server.put("data", f"changing/{key}", bytes(data))
    with pytest.raises(errors.DataChanged, match=r"first change: file \d+ "
                       r"'<root 0>/train/class_0/img_001.jpg' changed \(ETag or version\)"):
        Pipeline(spec, checkpoint=blob, objects=place.stores(), **kw)


def test_an_object_written_again_under_a_running_pipeline_is_not_read(
        place: Place, dataset: Path, env: None) -> None:
    """Looked up when the pipeline is built (GCS: its generation; Azure: its ETag), the
    object is read only as it was then: once written again, the read is DATA_LOSS naming
    it, never the other bytes."""
    key = "again/x.jpg"
    place.server.put("data", key, (dataset / "train" / "class_0" / "img_000.jpg").read_bytes())
    with Pipeline(raw(files=[place.url(key)], labels=[3]), data_roots=[place.url()],
                  objects=place.stores()) as pipe:
        place.server.put("data", key, b"other bytes")
        with pytest.raises(errors.DataFileError, match=rf"'<root 0>/again/x.jpg' \("
                           rf"{place.holder} 'data', key 'again/x.jpg'\): the object changed "
                           "since it was listed"):
            batches(pipe, 1)


def test_an_object_removed_after_listing_is_a_data_file_error_naming_it(
        place: Place, dataset: Path, env: None) -> None:
    place.server.upload_tree("data", dataset / "train" / "class_2", "shrinking/only")
    with Pipeline(raw(file_root=place.url("shrinking")), data_roots=[place.url("shrinking")],
                  objects=place.stores()) as pipe:
        place.server.delete("data", "shrinking/only/img_002.jpg")
        with pytest.raises(errors.DataFileError, match=rf"'<root 0>/only/img_002.jpg' \("
                           rf"{place.holder} 'data', key 'shrinking/only/img_002.jpg'\): "):
            batches(pipe, 1)


BAD = [
    ("{s}://no-such-bucket/train", ["{s}://no-such-bucket"], errors.InvalidArgument,
     r"file_root '{s}://no-such-bucket/train': the {holder} 'no-such-bucket' does not exist: "
     r"check the {holder}'s name"),
    ("{s}://data/nothing-here", ["{s}://data"], errors.InvalidArgument,
     r"file_root '<root 0>/nothing-here': no object has a key below nothing-here/: check"),
    ("{s}://data/train", ["{s}://data/other"], errors.PermissionDenied,
     r"file_root '{s}://data/train' is outside the data roots.*check the {holder} and key.*"
     r"--data-root {s}://{HOLDER}/PREFIX"),
    ("{s}://data/train", ["{other}://data"], errors.PermissionDenied,
     r"file_root '{s}://data/train' is outside the data roots"),
    ("{s}://Not_A_Bucket/train", None, errors.InvalidArgument,
     r"'Not_A_Bucket' is not a {holder} name of"),
    ("{s}://data/train/../secret", None, errors.InvalidArgument,
     r"a key with an empty, '.' or '..' component is refused"),
]


@pytest.mark.parametrize(("root", "roots", "error", "message"), BAD)
def test_bad_input_is_a_clear_error(place: Place, env: None, root: str,
                                    roots: list[str] | None, error: type[errors.ConveyorError],
                                    message: str) -> None:
    names = dict(s=place.scheme, holder=place.holder, HOLDER=place.holder.upper(),
                 other="az" if place.scheme == "gs" else "gs")
    with pytest.raises(error, match=message.format(**names)) as raised:
        Pipeline(raw(file_root=root.format(**names)),
                 data_roots=[r.format(**names) for r in roots] if roots else None,
                 objects=place.stores())
    assert raised.value.code not in ("INTERNAL", "UNKNOWN")


def test_a_missing_key_in_files_names_it(place: Place, env: None) -> None:
    with pytest.raises(errors.DataFileError, match=rf"cannot read '{place.scheme}://data/train/"
                       rf"nope.jpg' \({place.holder} 'data', key 'train/nope.jpg'\): no such "
                       "key"):
        Pipeline(raw(files=[place.url("train/nope.jpg")]), objects=place.stores())


def test_tfrecord_records_are_byte_ranges_of_objects(place: Place, env: None,
                                                     tmp_path: Path) -> None:
    """Each record one ranged GET of its object, as listed (GCS: its generation)."""
    from tests.engine.test_readers_tfrecord import records
    from tests.support import record_data

    paths, indexes = record_data.write_tfrecords(tmp_path / "tf", [4, 3])
    place.server.upload_tree("data", tmp_path / "tf", "tf")
    remote = [place.url(f"tf/{Path(p).name}") for p in paths]
    remote_indexes = [place.url(f"tf/{Path(p).name}") for p in indexes]
    with Pipeline(records(paths, indexes, random_shuffle=True), data_roots=[tmp_path]) as a, \
            Pipeline(records(remote, remote_indexes, random_shuffle=True),
                     data_roots=[place.url("tf")], objects=place.stores()) as b:
        assert sample_bytes(a, 4) == sample_bytes(b, 4)


def test_the_node_cache_serves_the_second_epoch(place: Place, dataset: Path, env: None,
                                                tmp_path: Path) -> None:
    observer = Counted()
    objects = ObjectStores(place.settings(cache_dir=str(tmp_path / "cache"),
                                          cache_max_bytes=1 << 30), observer)
    spec = raw(file_root=place.url("train"), random_shuffle=True, batch_size=2)
    with Pipeline(raw(file_root=str(dataset / "train"), random_shuffle=True,
                      batch_size=2)) as folder:
        expected = batches(folder, 10)  # two epochs
    with Pipeline(spec, data_roots=[place.url()], objects=objects) as pipe:
        assert batches(pipe, 10) == expected
    samples = len(list((dataset / "train").glob("class_*/**/*.jpg")))
    assert observer.requests["get"] == samples  # each object fetched once


def test_the_configured_endpoint_reaches_the_store(place: Place, dataset: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """``object_storage.gcs.endpoint`` (credentials that ask for no token) and
    ``object_storage.azure.endpoint`` (an account name and key from the environment): the
    same batches; plain http to it refused unless allowed, naming the setting."""
    clear_store_env(monkeypatch)
    if isinstance(place.server, FakeGcsProcess):
        account = tmp_path / "sa.json"
        account.write_text('{"disable_oauth": true, "client_email": "", "private_key": "", '
                           '"private_key_id": ""}')
        monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", str(account))
        endpoint, key = place.server.url, "gcs"
    else:
        for name, value in place.server.account_env().items():
            monkeypatch.setenv(name, value)
        endpoint, key = place.server.endpoint, "azure"
    def reaching(store: StoreSettings) -> ObjectStores:
        return ObjectStores(ObjectStoreSettings(gcs=store) if key == "gcs"
                            else ObjectStoreSettings(azure=store))
    with Pipeline(raw(file_root=str(dataset / "train")), data_roots=[dataset]) as a, \
            Pipeline(raw(file_root=place.url("train")), data_roots=[place.url()],
                     objects=reaching(StoreSettings(endpoint, allow_http=True))) as b:
        assert batches(a, 3) == batches(b, 3)
    refused = reaching(StoreSettings(endpoint))
    with pytest.raises(errors.InvalidArgument, match=rf"{place.holder} 'data': its endpoint "
                       rf"'{endpoint}' is plain http.*set allow_http: true in "
                       rf"object_storage.{key}"):
        Pipeline(raw(file_root=place.url("train")), data_roots=[place.url()], objects=refused)


def test_gcs_plain_http_from_the_service_account_is_refused_unless_allowed(
        dataset: Path, gcs: FakeGcsProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """The base URL of the key file (``gcs_base_url``) is not read here: obstore refuses
    the request, and the error names the setting."""
    clear_store_env(monkeypatch)
    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    with pytest.raises(errors.InvalidArgument, match=r"file_root 'gs://data/train': plain http "
                       r"to the endpoint is not allowed: set object_storage.gcs.allow_http"):
        Pipeline(raw(file_root="gs://data/train"), data_roots=["gs://data"],
                 objects=ObjectStores())
    monkeypatch.setenv("GOOGLE_ALLOW_HTTP", "true")  # or obstore's variable
    gcs.upload_tree("data", dataset / "train", "train")
    with Pipeline(raw(file_root="gs://data/train"), data_roots=["gs://data"],
                  objects=ObjectStores()) as pipe:
        assert len(batches(pipe, 1)[0][0]) == 4


def test_gcs_credentials_that_cannot_be_used_are_named(gcs: FakeGcsProcess, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Key files that cannot be used: no JSON, a private key that is no key (refused as
    the client is made), application default credentials without a key (refused as the
    first request is signed, before anything is sent). The message holds nothing of the
    file."""
    clear_store_env(monkeypatch)
    secret = "-----BEGIN PRIVATE KEY-----\\nnot-a-key-but-secret\\n-----END PRIVATE KEY-----\\n"
    files = {"GOOGLE_SERVICE_ACCOUNT": ["{not json", f'{{"client_email": "reader@example", '
                                        f'"private_key": "{secret}", "private_key_id": "k1"}}'],
             "GOOGLE_APPLICATION_CREDENTIALS": ['{"type": "service_account", "client_email": '
                                                '"reader@example", "private_key": "", '
                                                '"private_key_id": "k1"}']}
    objects = ObjectStores(ObjectStoreSettings(gcs=StoreSettings(endpoint=gcs.url,
                                                                 allow_http=True)))
    for variable, texts in files.items():
        for text in texts:
            path = tmp_path / "key.json"
            path.write_text(text)
            monkeypatch.setenv(variable, str(path))
            with pytest.raises(errors.PermissionDenied, match=r"the server's credentials for "
                               r"gs://data cannot be used \(the server's log says why\): check "
                               r"the service account key file that "
                               r"GOOGLE_APPLICATION_CREDENTIALS") as raised:
                Pipeline(raw(file_root="gs://data/train"), data_roots=["gs://data"],
                         objects=ObjectStores(objects.settings))
            assert "not-a-key-but-secret" not in str(raised.value)
            monkeypatch.delenv(variable)


def test_azure_access_denied_names_the_container_and_no_signature(
        azurite: AzuriteProcess, dataset: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A SAS that may read but not list: the listing is denied, naming the container and
    what to grant; the SAS's signature is in no message and no log line."""
    clear_store_env(monkeypatch)
    azurite.upload_tree("data", dataset / "train", "train")
    sas = azurite.sas("r")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1")
    monkeypatch.setenv("AZURE_STORAGE_SAS_TOKEN", sas)
    objects = ObjectStores(ObjectStoreSettings(azure=StoreSettings(endpoint=azurite.endpoint,
                                                                   allow_http=True)))
    signature = sas.rpartition("sig=")[2]
    with caplog.at_level(logging.INFO, logger="conveyor"), \
            pytest.raises(errors.PermissionDenied, match=r"access denied by the store for "
                          r"container 'data': give the server's identity \(its Azure identity"
                          r".*\) read and list access \(Storage Blob Data Reader\)") as raised:
        Pipeline(raw(file_root="az://data/train"), data_roots=["az://data"], objects=objects)
    assert "AuthorizationPermissionMismatch" not in str(raised.value)  # the store's words: logged
    assert any("403 Forbidden" in r.getMessage() and "(AuthorizationPermissionMismatch)" in
               r.getMessage() for r in caplog.records)
    for said in [str(raised.value)] + [r.getMessage() for r in caplog.records]:
        assert signature not in said and KEY not in said
    # the same SAS reads an object named by files (a HEAD and a GET: no listing)
    with Pipeline(raw(files=["az://data/train/class_0/img_000.jpg"]), data_roots=["az://data"],
                  objects=objects) as pipe:
        assert batches(pipe, 1)[0][0][0] == (dataset / "train/class_0/img_000.jpg").read_bytes()


def test_azure_without_a_storage_account_or_a_usable_key_is_refused_saying_what_to_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No request is made; the key is in no message."""
    clear_store_env(monkeypatch)
    with pytest.raises(errors.InvalidArgument, match=r"container 'data': the server has no "
                       r"Azure storage account: set AZURE_STORAGE_ACCOUNT_NAME"):
        Pipeline(raw(file_root="az://data/train"), data_roots=["az://data"],
                 objects=ObjectStores())
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "datasets")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "not base64: secret")
    with pytest.raises(errors.PermissionDenied, match=r"container 'data': the server's "
                       r"credentials for az://data cannot be used \(the server's log says "
                       r"why\): check the Azure credentials .*AZURE_STORAGE_ACCOUNT_KEY") as raised:
        Pipeline(raw(file_root="az://data/train"), data_roots=["az://data"],
                 objects=ObjectStores())
    assert "secret" not in str(raised.value)


SPELLINGS = [
    ("abfs://data@acct.dfs.core.windows.net/train/x.jpg",
     r"objects of Azure Blob Storage are spelled az://CONTAINER/KEY, the storage account "
     r"being the server's \(AZURE_STORAGE_ACCOUNT_NAME\): write az://data/train/x.jpg"),
    ("azure://data/train", r"write az://data/train"),
    ("wasbs://data@acct.blob.core.windows.net/train", r"write az://data/train"),
    ("gcs://data/train", r"objects of Google Cloud Storage are spelled gs://BUCKET/KEY: write "
                         r"gs://data/train"),
    ("ftp://data/train", r"the scheme ftp:// is not served; object storage is read through "
                         r"s3://, gs://, az://"),
    ("az://data_set/train", r"'data_set' is not a container name of Azure Blob Storage"),
    ("az://da--ta/train", r"'da--ta' is not a container name"),
    ("s3://data_set/train", r"'data_set' is not a bucket name of S3"),
    ("gs://" + "a" * 64 + "/train", r"is not a bucket name of Google Cloud Storage"),
]


@pytest.mark.parametrize(("text", "message"), SPELLINGS)
def test_other_spellings_and_names_are_refused_naming_the_fix(text: str, message: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message):
        parse_object_url(text, "file_root")


def test_each_store_names_its_buckets_as_it_allows() -> None:
    assert str(parse_object_url("gs://my_data.set/train/")) == "gs://my_data.set/train"
    assert str(parse_object_url("gs://" + ".".join(["a" * 60] * 3) + "/x")).startswith("gs://")
    assert str(parse_object_url("az://data-2/a b+c.jpg")) == "az://data-2/a b+c.jpg"
    assert parse_object_url("GS://data/x").scheme == "gs"


def test_a_logged_answer_holds_no_signature_of_its_url() -> None:
    """obstore leaves a SAS out of its messages already; a URL's signature or token that
    reaches a log line all the same is blanked."""
    said = blank_secrets("GET http://h/c/k?sv=2020-08-04&sig=abc%2Fdef&se=2099 failed; "
                         "https://b/k?X-Amz-Signature=0f0f&X-Amz-Security-Token=tok&x=1 too")
    assert "abc" not in said and "0f0f" not in said and "tok" not in said
    assert "sv=2020-08-04" in said and "se=2099" in said and "x=1" in said
