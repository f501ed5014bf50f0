"""The node cache: pipelines of one server sharing it fetch each object once, a changed
object is never served from it, its bytes stay bounded with the least recently used out
first, and it is found again after a restart."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conveyor_server import Pipeline
from conveyor_server.engine.data.node_cache import NodeCache, entry_name
from conveyor_server.engine.data.object_clients import BucketSettings, ObjectStoreSettings
from conveyor_server.engine.data.object_store import ObjectStores
from tests.engine.test_object_storage import batches, raw
from tests.support.images import make_image_folder
from tests.support.seaweed import REGION, WeedProcess


class Counted:
    """An ObjectStoreObserver that counts."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.bytes_fetched = 0
        self.lookups: Counter[bool] = Counter()
        self.retries = 0
        #: Reads by a pipeline's workers, by whether their request was made ahead.
        self.taken: Counter[bool] = Counter()

    def request(self, kind: str, seconds: float, ok: bool) -> None:
        self.requests[kind] += 1

    def fetched(self, nbytes: int) -> None:
        self.bytes_fetched += nbytes

    def retried(self, kind: str) -> None:
        self.retries += 1

    def cached(self, hit: bool) -> None:
        self.lookups[hit] += 1

    def took(self, ahead: bool) -> None:
        self.taken[ahead] += 1


def cached_stores(weed: WeedProcess, cache: Path, max_bytes: int,
                  observer: Counted | None = None) -> ObjectStores:
    settings = ObjectStoreSettings(
        default=BucketSettings(endpoint=weed.endpoint, region=REGION, allow_http=True),
        cache_dir=str(cache), cache_max_bytes=max_bytes)
    return ObjectStores(settings, observer)


def test_pipelines_sharing_the_cache_fetch_each_object_once(
        weed: WeedProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in weed.env().items():
        monkeypatch.setenv(key, value)
    local = make_image_folder(tmp_path / "train", counts=(4, 4))
    weed.upload_tree("data", local, "shared/train")
    sizes = sorted(p.stat().st_size for p in local.rglob("*.jpg"))
    observer = Counted()
    objects = cached_stores(weed, tmp_path / "cache", 1 << 30, observer)
    spec = raw(file_root="s3://data/shared/train", random_shuffle=True, batch_size=2)
    with Pipeline(raw(file_root=str(local), random_shuffle=True, batch_size=2)) as folder:
        expected = batches(folder, 8)  # two epochs
    with Pipeline(spec, data_roots=["s3://data/shared"], objects=objects) as first:
        assert batches(first, 8) == expected
    gets = observer.requests["get"]
    assert gets == len(sizes)  # the second epoch came from the cache
    assert observer.bytes_fetched == sum(sizes)
    taken = sum(observer.taken.values())
    with Pipeline(spec, data_roots=["s3://data/shared"], objects=objects) as second:
        assert batches(second, 4) == expected[:4]
    assert observer.requests["get"] == gets  # no request: every object was a hit
    # Read from the cache on the reading threads: nothing was asked ahead, or when read.
    assert sum(observer.taken.values()) == taken
    # One miss per object (concurrent reads of one wait for its one lookup), the rest hits.
    assert observer.lookups[False] == len(sizes) and observer.lookups[True] >= 8 + 8
    assert objects.cache is not None and objects.cache.bytes == sum(sizes)

    changed = bytearray((local / "class_0" / "img_000.jpg").read_bytes())
    changed[-3] ^= 0xFF
    weed.put("data", "shared/train/class_0/img_000.jpg", bytes(changed))
    with Pipeline(raw(files=["s3://data/shared/train/class_0/img_000.jpg"], batch_size=1),
                  data_roots=["s3://data/shared"], objects=objects) as after:
        assert batches(after, 1)[0][0] == [bytes(changed)]  # a new ETag: fetched, not stale
    assert observer.requests["get"] == gets + 1


def test_the_cache_is_bounded_least_recently_used_out_and_found_again(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path, max_bytes=250)
    names = [entry_name("s3://b", f"k{i}", f'"etag{i}"', "") for i in range(4)]
    for name in names[:2]:
        cache.put(name, b"x" * 100)
    assert cache.get(names[0], 100) == b"x" * 100  # names[1] is now the least recent
    cache.put(names[2], b"y" * 100)
    assert cache.bytes == 200 and cache.count == 2
    assert cache.get(names[1], 100) is None
    assert cache.get(names[0], 100) is not None and cache.get(names[2], 100) is not None
    assert cache.get(names[0], 99) is None  # not the listed size: a miss
    cache.put(names[3], b"z" * 1000)  # larger than the bound: not kept
    assert cache.get(names[3], 1000) is None
    again = NodeCache(tmp_path, max_bytes=250)
    assert again.bytes == 200 and again.get(names[2], 100) == b"y" * 100
    smaller = NodeCache(tmp_path, max_bytes=150)
    assert smaller.bytes == 100 and smaller.count == 1
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*")) == 100


def test_arrays_read_whole_go_through_the_cache(weed: WeedProcess, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.engine.test_readers_numpy import arrays
    from tests.support.reader_data import make_npy_folder

    for key, value in weed.env().items():
        monkeypatch.setenv(key, value)
    local = make_npy_folder(tmp_path / "npy", count=4)
    weed.upload_tree("data", tmp_path / "npy", "arrays")
    observer = Counted()
    objects = cached_stores(weed, tmp_path / "cache", 1 << 30, observer)
    for _ in range(2):
        with Pipeline(arrays(file_root="s3://data/arrays"), data_roots=["s3://data"],
                      objects=objects) as pipe:
            got = [bytes(pipe.run()[0][0]) for _ in range(4)]
        assert got == [np.load(p).tobytes() for p in local]
    assert observer.requests["get"] == 4 and observer.lookups[True] >= 4
