"""A file reader's list over object storage: ``file_root``, ``file_list`` and ``files``
given as object URLs (``s3://``, ``gs://``, ``az://``), each checked against the object
roots and listed with its size, ETag and version id.

The order is the one a local copy of the tree gives (``file_list._walk_sorted``): the
classes are the first key components below ``file_root``, sorted; within a class a
folder's files come first, names sorted, then each subfolder's, so ``s3://b/train`` and a
folder holding the same files list the same entries in the same order. Objects named by
``files`` or a ``file_list`` are looked up (``HEAD``) concurrently on the request loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from conveyor.errors import InvalidArgument
from conveyor_server.engine.data.entries import FileEntry, file_list_lines, unfit_name
from conveyor_server.engine.data.object_errors import (
    ObjectStoreFailure,
    argument_error,
    read_error,
)
from conveyor_server.engine.data.object_store import ObjectInfo, ObjectStores
from conveyor_server.engine.data.object_urls import ObjectUrl, is_object_url, parse_object_url
from conveyor_server.engine.data.roots import DataRoots, outside_object_roots

OP = "readers.file"
#: Objects looked up at once while a list is resolved.
_LOOKUPS = 32


def walk_order(relative: str) -> tuple[tuple[int, str], ...]:
    """The sort key of a relative key in the order of a walk of its folders: at each level
    the files (0) before the folders (1), names sorted."""
    parts = relative.split("/")
    return (*((1, p) for p in parts[:-1]), (0, parts[-1]))


class ObjectPlaces:
    """One reader's view of the object roots."""

    def __init__(self, op: str, roots: DataRoots | None, objects: ObjectStores) -> None:
        self.op = op
        self.roots = roots
        self.objects = objects

    def url(self, text: str, what: str) -> tuple[ObjectUrl, int, str]:
        """``text`` parsed, with the object root it lies beneath and its key relative to it
        (-1, "" without roots); PermissionDenied if it lies below none."""
        url = parse_object_url(text, f"{self.op}: {what}")
        if self.roots is None:
            return url, -1, ""
        found = self.roots.locate_object(url)
        if found is None:
            raise outside_object_roots(self.op, what, str(url))
        return url, found[0], found[1]

    def name(self, url: ObjectUrl) -> str:
        return str(url) if self.roots is None else self.roots.name(str(url))

    def listing(self, url: ObjectUrl, what: str) -> list[ObjectInfo]:
        try:
            found = self.objects.list(url, self.objects.settings.max_listed_objects)
        except ObjectStoreFailure as failure:
            raise argument_error(failure, self.op, what) from None
        if not found:
            raise InvalidArgument(f"{self.op}: {what} {self.name(url)!r}: no object has a key "
                                  f"below {url.key + '/' if url.key else '(the bucket)'}: "
                                  "check the bucket and prefix", bucket=url.bucket)
        return found

    def read_text(self, url: ObjectUrl, what: str) -> str:
        try:
            data = self.objects.get(url)
        except ObjectStoreFailure as failure:
            raise argument_error(failure, self.op, what) from None
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise InvalidArgument(f"{self.op}: {what} {self.name(url)!r} is not UTF-8 "
                                  "text") from None

    def heads(self, urls: Sequence[ObjectUrl]) -> list[ObjectInfo]:
        """Each object's listing, looked up concurrently; DataFileError naming the first
        that cannot be."""
        async def all_heads() -> list[ObjectInfo]:
            gate = asyncio.Semaphore(_LOOKUPS)

            async def one(url: ObjectUrl) -> ObjectInfo:
                async with gate:
                    return await self.objects.head_async(url)
            return list(await asyncio.gather(*(one(u) for u in urls)))
        try:
            return self.objects.submit(all_heads()).result()
        except ObjectStoreFailure as failure:
            if failure.kind in ("missing", "changed", "transient"):
                raise read_error(failure, self.op, self.name(failure.url)) from None
            raise argument_error(failure, self.op, "file") from None


def uses_objects(file_root: str, file_list: str, files: Sequence[str] | None) -> bool:
    return is_object_url(file_root) or is_object_url(file_list) or \
        any(is_object_url(f) for f in files or ())


def resolve_objects(file_root: str, file_list: str, files: Sequence[str] | None,
                    labels: Sequence[int] | None, wanted: Callable[[str], bool],
                    roots: DataRoots | None, objects: ObjectStores) -> list[FileEntry]:
    """The reader's objects in reading order (its arguments checked already)."""
    places = ObjectPlaces(OP, roots, objects)
    root = places.url(file_root, "file_root")[0] if file_root else None
    if file_root and not is_object_url(file_root):
        raise InvalidArgument(f"{OP}: file_root {file_root!r} is a folder, the files object "
                              "URLs: give both as object URLs (s3://, gs://, az://), or both "
                              "as paths")
    if files and not file_list:
        if root is None:
            urls = [places.url(f, f"files[{i}]")[0] for i, f in enumerate(files)]
        else:
            urls = [_below(root, f, f"files[{i}]") for i, f in enumerate(files)]
        pairs = [(u, labels[i] if labels else i) for i, u in enumerate(urls)]
        return _entries(places, pairs, places.heads([u for u, _ in pairs]))
    if file_list:
        listed = places.url(file_list, "file_list")[0]
        base = root or ObjectUrl(listed.scheme, listed.bucket, listed.key.rpartition("/")[0])
        pairs = _parse_list(places.read_text(listed, "file_list"), base, places.name(listed))
        if not pairs:
            raise InvalidArgument(f"{OP}: no files found in {places.name(listed)!r}")
        return _entries(places, pairs, places.heads([u for u, _ in pairs]))
    assert root is not None
    return _scan(places, root, wanted)


def _below(root: ObjectUrl, name: str, what: str) -> ObjectUrl:
    if is_object_url(name):
        raise InvalidArgument(f"{OP}: {what} {name!r} is a URL: with file_root, files are keys "
                              "relative to it")
    return parse_object_url(str(root.below(name)), f"{OP}: {what}")


def _parse_list(text: str, base: ObjectUrl, name: str) -> list[tuple[ObjectUrl, int]]:
    return [(_below(base, path, f"file_list {name!r} line {number}"), label)
            for number, path, label in file_list_lines(text, name, OP)]


def _scan(places: ObjectPlaces, root: ObjectUrl, wanted: Callable[[str], bool]) -> list[FileEntry]:
    found = places.listing(root, "file_root")
    prefix = len(root.key) + 1 if root.key else 0
    classified: list[tuple[str, ObjectInfo]] = []
    for info in found:
        relative = info.key[prefix:]
        if "/" not in relative or not wanted(relative.rpartition("/")[2]):
            continue  # a class is a folder: objects right below the root are no sample
        classified.append((relative, info))
    classes = sorted({r.split("/", 1)[0] for r, _ in classified})
    label_of = {c: i for i, c in enumerate(classes)}
    classified.sort(key=lambda item: (item[0].split("/", 1)[0],
                                      walk_order(item[0].split("/", 1)[1])))
    if not classified:
        raise InvalidArgument(f"{OP}: no files found in {places.name(root)!r} (a class is a "
                              "prefix below it: KEY/CLASS/NAME)")
    pairs = [(root.below(r), label_of[r.split("/", 1)[0]]) for r, _ in classified]
    return _entries(places, pairs, [info for _, info in classified])


def _entries(places: ObjectPlaces, pairs: Sequence[tuple[ObjectUrl, int]],
             infos: Sequence[ObjectInfo]) -> list[FileEntry]:
    entries = []
    for (url, label), info in zip(pairs, infos, strict=True):
        text = str(url)
        if why := unfit_name(text):
            raise InvalidArgument(f"{OP}: object {places.name(url)!r} {why}: rename it")
        index, relative = -1, ""
        if places.roots is not None:
            found = places.roots.locate_object(url)
            if found is None:
                raise outside_object_roots(OP, "file", text)
            index, relative = found
        entries.append(FileEntry(text, info.size, int(label), 0, index, relative,
                                 info.etag, info.version))
    return entries
