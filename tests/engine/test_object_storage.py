"""``readers.file`` over a real S3 server (SeaweedFS on loopback): the same batches as from
a folder holding the same files, a restore over a changed object refused naming its key,
and every bad input a clear error naming the bucket or key, never INTERNAL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def
from conveyor_server import Pipeline
from conveyor_server.engine.data.file_list import resolve
from conveyor_server.engine.data.listings import MemoryListings
from conveyor_server.engine.data.object_clients import BucketSettings, ObjectStoreSettings
from conveyor_server.engine.data.object_store import ObjectStores
from tests.support.images import make_image_folder
from tests.support.seaweed import OUTSIDER, REGION, WeedProcess


@pipeline_def(batch_size=4, num_threads=2, seed=7, enable_checkpointing=True)
def raw(**reader: Any) -> Any:
    files, labels = fn.readers.file(name="reader", **reader)
    return files, labels


@pytest.fixture(scope="module")
def dataset(weed: WeedProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder data set (classes, a nested folder, a file right below the root, a file
    the filters leave out) and the same files in ``s3://data/train``."""
    root = tmp_path_factory.mktemp("local")
    train = make_image_folder(root / "train", counts=(3, 2, 4))
    (train / "class_1" / "deeper").mkdir()
    (train / "class_1" / "deeper" / "a.jpg").write_bytes((train / "class_0" /
                                                          "img_000.jpg").read_bytes())
    (train / "class_1" / "z.jpg").write_bytes((train / "class_2" / "img_001.jpg").read_bytes())
    (train / "loose.jpg").write_bytes(b"not a sample")
    (train / "class_0" / "notes.txt").write_text("left out by the filters")
    weed.upload_tree("data", train, "train")
    return root


def stores(weed: WeedProcess, **bucket: Any) -> ObjectStores:
    settings: dict[str, Any] = dict(endpoint=weed.endpoint, region=REGION, allow_http=True)
    settings |= bucket
    return ObjectStores(ObjectStoreSettings(default=BucketSettings(**settings)))


def batches(pipe: Pipeline, count: int) -> list[tuple[list[bytes], list[int]]]:
    out = []
    for _ in range(count):
        files, labels = pipe.run()
        out.append(([bytes(f) for f in files], [int(np.asarray(x)[0]) for x in labels]))
    return out


def sample_bytes(pipe: Pipeline, count: int) -> list[list[bytes]]:
    """Every sample of ``count`` batches, as its outputs' bytes."""
    return [[np.asarray(out[s]).tobytes() for out in batch]
            for batch in (pipe.run() for _ in range(count))
            for s in range(len(batch[0]))]


def test_objects_list_and_read_as_the_same_folder(weed: WeedProcess, dataset: Path,
                                                  aws_env: None) -> None:
    local = resolve({"file_root": str(dataset / "train")}, [dataset])
    remote = resolve({"file_root": "s3://data/train"}, ["s3://data"], stores(weed))
    assert [(e.relative, e.size, e.label) for e in remote] == \
        [(e.relative, e.size, e.label) for e in local]
    assert all(e.etag for e in remote)
    spec = dict(random_shuffle=True, shuffle_after_epoch=False)
    with Pipeline(raw(file_root=str(dataset / "train"), **spec),
                  data_roots=[dataset]) as a, \
            Pipeline(raw(file_root="s3://data/train", **spec), data_roots=["s3://data"],
                     objects=stores(weed)) as b:
        assert batches(a, 7) == batches(b, 7)  # over two epochs


def test_a_named_aws_profile_is_the_credentials(weed: WeedProcess, dataset: Path,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """No keys in the environment: the profile AWS_PROFILE names in the shared files gives
    them, and its config its region and endpoint (as the AWS tools read them)."""
    key, secret = weed.env()["AWS_ACCESS_KEY_ID"], weed.env()["AWS_SECRET_ACCESS_KEY"]
    (tmp_path / "credentials").write_text(
        f"[trainer-data]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    (tmp_path / "config").write_text(
        f"[profile trainer-data]\nregion = {REGION}\nendpoint_url = {weed.endpoint}\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                 "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "trainer-data")
    objects = ObjectStores(ObjectStoreSettings(default=BucketSettings(allow_http=True)))
    with Pipeline(raw(file_root=str(dataset / "train")), data_roots=[dataset]) as a, \
            Pipeline(raw(file_root="s3://data/train"), data_roots=["s3://data"],
                     objects=objects) as b:
        assert batches(a, 3) == batches(b, 3)
    monkeypatch.setenv("AWS_PROFILE", "someone-else")
    with pytest.raises(errors.InvalidArgument, match="AWS_PROFILE names the profile "
                                                     "'someone-else'"):
        Pipeline(raw(file_root="s3://data/train"), data_roots=["s3://data"],
                 objects=ObjectStores(ObjectStoreSettings(
                     default=BucketSettings(allow_http=True))))


def test_files_and_file_list_name_objects(weed: WeedProcess, dataset: Path,
                                          aws_env: None) -> None:
    weed.put("data", "lists/train.txt",
             b"train/class_2/img_003.jpg 5\ntrain/class_0/img_001.jpg 1\n")
    objects = stores(weed)
    listed = resolve({"file_list": "s3://data/lists/train.txt", "file_root": "s3://data"},
                     ["s3://data"], objects)
    assert [(e.path, e.label) for e in listed] == [
        ("s3://data/train/class_2/img_003.jpg", 5), ("s3://data/train/class_0/img_001.jpg", 1)]
    named = resolve({"files": ["class_2/img_003.jpg"], "file_root": "s3://data/train"},
                    ["s3://data/train"], objects)
    assert named[0].size == listed[0].size and named[0].etag == listed[0].etag
    with Pipeline(raw(files=["s3://data/train/class_0/img_001.jpg"], labels=[9]),
                  data_roots=["s3://data"], objects=objects) as pipe:
        files, labels = batches(pipe, 1)[0]
    assert files[0] == (dataset / "train" / "class_0" / "img_001.jpg").read_bytes()
    assert labels[0] == 9


def test_a_restore_over_a_changed_object_is_refused_naming_its_key(
        weed: WeedProcess, dataset: Path, aws_env: None) -> None:
    weed.upload_tree("data", dataset / "train", "changing/train")
    spec = raw(file_root="s3://data/changing/train", random_shuffle=True)
    listings = MemoryListings()
    kw: dict[str, Any] = dict(data_roots=["s3://data/changing"], listings=listings)
    with Pipeline(spec, objects=stores(weed), **kw) as pipe:
        batches(pipe, 1)
        blob = pipe.checkpoint()
        expected = batches(pipe, 2)
    with Pipeline(spec, checkpoint=blob, objects=stores(weed), **kw) as again:
        assert batches(again, 2) == expected  # unchanged: the same bytes
    key = "train/class_0/img_001.jpg"
    data = bytearray((dataset / key).read_bytes())
    data[-3] ^= 0xFF  # the same size, other bytes: only the ETag tells
    weed.put("data", f"changing/{key}", bytes(data))
    with pytest.raises(errors.DataChanged, match=r"first change: file \d+ "
                       r"'<root 0>/train/class_0/img_001.jpg' changed \(ETag or version\)"):
        Pipeline(spec, checkpoint=blob, objects=stores(weed), **kw)


def test_an_object_removed_after_listing_is_a_data_file_error_naming_it(
        weed: WeedProcess, dataset: Path, aws_env: None) -> None:
    weed.upload_tree("data", dataset / "train" / "class_0", "shrinking/only")
    with Pipeline(raw(file_root="s3://data/shrinking"), data_roots=["s3://data/shrinking"],
                  objects=stores(weed)) as pipe:
        weed.delete("data", "shrinking/only/img_002.jpg")
        with pytest.raises(errors.DataFileError, match=r"'<root 0>/only/img_002.jpg' \(bucket "
                           r"'data', key 'shrinking/only/img_002.jpg'\): no such key: it was "
                           "removed"):
            batches(pipe, 1)


BAD = [
    ("s3://no-such-bucket/train", ["s3://no-such-bucket"], {}, errors.InvalidArgument,
     r"the bucket 'no-such-bucket' does not exist: check"),
    ("s3://data/nothing-here", ["s3://data"], {}, errors.InvalidArgument,
     r"file_root '<root 0>/nothing-here': no object has a key below nothing-here/: check"),
    ("s3://data/train", ["s3://data/other"], {}, errors.PermissionDenied,
     r"file_root 's3://data/train' is outside the data roots.*--data-root s3://"),
    ("s3://Not_A_Bucket/train", None, {}, errors.InvalidArgument,
     r"'Not_A_Bucket' is not a bucket name"),
    ("s3://data/train/../secret", None, {}, errors.InvalidArgument,
     r"a key with an empty, '.' or '..' component is refused"),
    ("abfs://data@account.dfs.core.windows.net/train", None, {}, errors.InvalidArgument,
     r"objects of Azure Blob Storage are spelled az://CONTAINER/KEY.*write az://data/train"),
    ("s3://data/train", ["s3://data"], {"allow_http": False}, errors.InvalidArgument,
     r"bucket 'data': its endpoint 'http://127.0.0.1:\d+' is plain http.*allow_http: true"),
]


@pytest.mark.parametrize(("root", "roots", "bucket", "error", "message"), BAD)
def test_bad_input_is_a_clear_error(weed: WeedProcess, dataset: Path, aws_env: None,
                                    root: str, roots: list[str] | None, bucket: dict[str, Any],
                                    error: type[errors.ConveyorError], message: str) -> None:
    with pytest.raises(error, match=message) as raised:
        Pipeline(raw(file_root=root), data_roots=roots, objects=stores(weed, **bucket))
    assert raised.value.code not in ("INTERNAL", "UNKNOWN")
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in str(raised.value)


def test_access_denied_names_the_bucket(weed: WeedProcess, dataset: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in weed.env(OUTSIDER).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(errors.PermissionDenied, match=r"access denied by the store for bucket "
                       r"'data': give the server's identity") as raised:
        Pipeline(raw(file_root="s3://data/train"), data_roots=["s3://data"],
                 objects=stores(weed))
    assert OUTSIDER[1] not in str(raised.value)


def test_a_missing_key_in_files_names_it(weed: WeedProcess, dataset: Path,
                                         aws_env: None) -> None:
    with pytest.raises(errors.DataFileError, match=r"cannot read 's3://data/train/nope.jpg' "
                       r"\(bucket 'data', key 'train/nope.jpg'\): no such key"):
        Pipeline(raw(files=["s3://data/train/nope.jpg"]), objects=stores(weed))


def test_tfrecord_records_are_byte_ranges_of_objects(weed: WeedProcess, dataset: Path,
                                                     aws_env: None, tmp_path: Path) -> None:
    """The same samples as from the folder; each record one ranged GET of its object; a
    restore over a rewritten object refused naming it."""
    from tests.engine.test_readers_tfrecord import records
    from tests.support import record_data

    paths, indexes = record_data.write_tfrecords(tmp_path / "tf", [4, 3])
    weed.upload_tree("data", tmp_path / "tf", "tf")
    remote = [f"s3://data/tf/{Path(p).name}" for p in paths]
    remote_indexes = [f"s3://data/tf/{Path(p).name}" for p in indexes]
    listings = MemoryListings()
    with Pipeline(records(paths, indexes, random_shuffle=True), data_roots=[tmp_path]) as a, \
            Pipeline(records(remote, remote_indexes, random_shuffle=True),
                     data_roots=["s3://data/tf"], objects=stores(weed),
                     listings=listings) as b:
        assert sample_bytes(a, 4) == sample_bytes(b, 4)
        blob = b.checkpoint()
    weed.put("data", "tf/part-1.tfrecord", Path(paths[1]).read_bytes())  # written again
    with Pipeline(records(remote, remote_indexes, random_shuffle=True), checkpoint=blob,
                  data_roots=["s3://data/tf"], objects=stores(weed), listings=listings):
        pass  # the same bytes again: the same ETag (an MD5), the restore is accepted
    changed = bytearray(Path(paths[1]).read_bytes())
    changed[20] ^= 0x01
    weed.put("data", "tf/part-1.tfrecord", bytes(changed))
    with pytest.raises(errors.DataChanged, match=r"TFRecord file 1 '<root 0>/part-1.tfrecord' "
                       r"changed \(ETag or version\)"):
        Pipeline(records(remote, remote_indexes, random_shuffle=True), checkpoint=blob,
                 data_roots=["s3://data/tf"], objects=stores(weed), listings=listings)


def test_numpy_arrays_are_objects_listed_as_dali_lists_a_folder(
        weed: WeedProcess, dataset: Path, aws_env: None, tmp_path: Path) -> None:
    from tests.engine.test_readers_numpy import arrays
    from tests.support.reader_data import make_npy_folder

    local = make_npy_folder(tmp_path / "npy", count=10)
    (tmp_path / "npy" / "part_0" / "deeper").mkdir()  # below a folder's folders: left out
    np.save(tmp_path / "npy" / "part_0" / "deeper" / "arr_999.npy", np.zeros(3))
    weed.upload_tree("data", tmp_path / "npy", "npy")
    objects = stores(weed)

    def read(spec: Any, count: int, **kw: Any) -> list[bytes]:
        with Pipeline(spec, **kw) as pipe:
            return [np.asarray(s).tobytes() for _ in range(count) for s in pipe.run()[0]]
    expected = [np.load(p).tobytes() for p in local]
    assert read(arrays(file_root="s3://data/npy"), 10, data_roots=["s3://data"],
                objects=objects) == expected
    named = [str(p.relative_to(tmp_path / "npy")) for p in local[::-1]]
    assert read(arrays(file_root="s3://data/npy", files=named), 10, data_roots=["s3://data"],
                objects=objects) == expected[::-1]
    shuffled = dict(random_shuffle=True, seed=5)
    assert read(arrays(file_root="s3://data/npy", **shuffled), 12, data_roots=["s3://data"],
                objects=objects) == read(arrays(file_root=str(tmp_path / "npy"), **shuffled),
                                         12, data_roots=[tmp_path])


def test_coco_images_and_annotations_are_objects(weed: WeedProcess, dataset: Path,
                                                 aws_env: None, tmp_path: Path) -> None:
    from tests.engine.test_readers_coco import coco
    from tests.support import record_data

    root, annotations = record_data.write_coco(tmp_path / "coco", 9)
    weed.upload_tree("data", tmp_path / "coco", "coco")
    options = dict(polygon_masks=True, image_ids=True, random_shuffle=True)

    def read(spec: Any, **kw: Any) -> list[list[bytes]]:
        with Pipeline(spec, **kw) as pipe:
            return sample_bytes(pipe, 4)
    assert read(coco("s3://data/coco/images", "s3://data/coco/annotations.json", **options),
                data_roots=["s3://data/coco"], objects=stores(weed)) == \
        read(coco(root, annotations, **options), data_roots=[tmp_path])


def test_webdataset_shards_are_read_by_ranges_of_objects(weed: WeedProcess, dataset: Path,
                                                         aws_env: None,
                                                         tmp_path: Path) -> None:
    """Indexed by walking the tar's headers in ranged GETs, or from index files; each
    sample one ranged GET of its members: the same samples as from the folder."""
    from tests.engine.test_readers_webdataset import wds
    from tests.support.reader_data import make_shards, write_index
    from tests.support.resume import batch_bytes, run_batches

    local = make_shards(tmp_path / "wds", [4, 3, 5])
    for shard in local:
        write_index(shard, shard.with_suffix(".idx"))
    weed.upload_tree("data", tmp_path / "wds", "wds")
    remote = [f"s3://data/wds/{p.name}" for p in local]
    indexes = [u.removesuffix(".tar") + ".idx" for u in remote]

    def read(spec: Any, **kw: Any) -> list[Any]:
        with Pipeline(spec, **kw) as pipe:
            return [batch_bytes(b) for b in run_batches(pipe, 8)]
    expected = read(wds(local, random_shuffle=True), data_roots=[tmp_path])
    objects = stores(weed)
    assert read(wds(remote, random_shuffle=True), data_roots=["s3://data/wds"],
                objects=objects) == expected
    assert read(wds(remote, random_shuffle=True, index_paths=indexes),
                data_roots=["s3://data/wds"], objects=objects) == expected


@pipeline_def(batch_size=1, seed=3)
def other_reader(reader: str, **args: Any) -> Any:
    out = getattr(fn.readers, reader)(**args)
    if isinstance(out, dict):
        return next(iter(out.values()))
    return out[0] if isinstance(out, (list, tuple)) else out


OTHER_READERS = [
    ("caffe", {"path": ["s3://data/lmdb"]}, "path"),
    ("caffe2", {"path": ["s3://data/lmdb"]}, "path"),
]


@pytest.mark.parametrize(("reader", "args", "what"), OTHER_READERS)
def test_readers_of_local_files_refuse_object_urls_clearly(reader: str, args: dict[str, Any],
                                                           what: str) -> None:
    """No request is made: the refusal comes before any store is asked."""
    with pytest.raises(errors.NotSupported, match=rf"readers.{reader}: {what} 's3://data/.*' "
                       rf"is in object storage, which readers.{reader} does not read") as raised:
        Pipeline(other_reader(f"{reader}", **args), data_roots=["s3://data"])
    assert raised.value.code == "INVALID_ARGUMENT"
