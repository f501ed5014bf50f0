"""``fn.readers.coco``: images and their object annotations from a COCO data set, as
DALI's reader.

``annotations_file`` is a COCO JSON document; ``file_root`` the folder its images'
``file_name``s are relative to. As DALI: the samples are the document's images in the
order of their ``id`` (stable for equal ids); each image's annotations are those whose
``image_id`` is its id, in the document's order, less those with ``iscrowd`` set (unless
``include_iscrowd``) and those whose box is narrower or lower than ``size_threshold``
pixels; ``skip_empty`` leaves out the images left with none. Labels are the categories'
positions in the document's ``categories`` list, from 1 (``avoid_class_remapping``: their
ids as written). Boxes are ``[x, y, w, h]`` (``ltrb``: ``[l, t, r, b]``) in float32 pixels, or
with ``ratio`` divided by the image's width and height; polygons (``polygon_masks``) are
``[box index, first vertex, end vertex]`` rows into the sample's vertices, scaled as the
boxes; ``pixelwise_masks`` (exclusive with ``polygon_masks``) gives each image an int32
``(height, width, 1)`` mask of labels rasterised from its polygons and RLEs
(``coco_masks.py`` states the rule). The document is parsed once, when the pipeline is
built: its size is bounded by ``limits.max_file_bytes`` before it is read, every field it
uses is type-checked (a field of the wrong type is INVALID_ARGUMENT naming the entry), and
each image's annotations by ``limits.max_batch_bytes`` as outputs (with the mask and the
polygon walk it needs).

The annotations are kept in flat numpy arrays (boxes, labels, vertices, polygon rows) with
each image's offsets (``coco_index.py``), so reading a sample is reading its image file (bounded by
``limits.max_file_bytes``) and slicing; the identity digests the document (its path, size
and stamp, and the digest of what was derived from it) and every image file. Images in
object storage are read whole, fetched ahead as their batch starts (``data/fetch_ahead.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.readers.build import (
    Reader,
    ReaderRequest,
    reader_orders,
    reader_stage,
    register_reader,
)
from conveyor_server.engine.readers.coco_index import CocoIndex, CocoOptions, DocumentError
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths
from conveyor_server.engine.readers.identity import ReaderIdentity

OP = "readers.coco"



def _load_document(paths: ReaderPaths, located: Located, limits: EngineLimits) -> Any:
    name = paths.name_of(located)
    limit = limits.max_file_bytes
    if limit is not None and located.size > limit:
        raise ResourceExhausted(f"{OP}: annotations file {name!r} is {located.size:,} bytes, "
                                f"above the server's limit limits.max_file_bytes = {limit:,}; "
                                "it was not read")
    try:
        with paths.open_binary(located, "annotations file", ahead=False) as f:
            data = f.read(located.size + 1)
    except OSError as exc:
        raise DataFileError(f"{OP}: cannot read annotations file {name!r}: "
                            f"{exc.strerror or exc}") from None
    if len(data) != located.size:
        raise DataFileError(f"{OP}: annotations file {name!r} changed while it was read")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{OP}: annotations file {name!r} is not JSON ({exc})") from None


class CocoSource:
    """Reads one image's bytes and slices its annotations."""

    def __init__(self, index: CocoIndex, images: list[Located], paths: ReaderPaths,
                 limits: EngineLimits) -> None:
        self._index = index
        self._images = images
        self._paths = paths
        self._limits = limits

    def where(self, index: int) -> str:
        return self._paths.name_of(self._images[index])

    def fetch_ahead(self, indices: Sequence[int]) -> None:
        """Start fetching these samples' images (whole objects) from object storage; an
        image above the limit is not fetched (its read refuses it)."""
        limit = self._limits.max_file_bytes
        self._paths.fetch_ahead((item, None) for item in (self._images[i] for i in indices)
                                if limit is None or item.size <= limit)

    def read(self, index: int) -> list[np.ndarray]:
        located = self._images[index]
        limit = self._limits.max_file_bytes
        if limit is not None and located.size > limit:
            raise ResourceExhausted(f"{OP}: image {self.where(index)!r} is {located.size:,} "
                                    f"bytes, above the server's limit limits.max_file_bytes "
                                    f"= {limit:,}; it was not read")
        try:
            with self._paths.open_binary(located, "image") as f:
                size = f.seek(0, os.SEEK_END)
                if size > located.size:
                    raise DataFileError(f"{OP}: image {self.where(index)!r} has {size:,} "
                                        f"bytes, {located.size:,} when the pipeline listed it")
                f.seek(0)
                data = f.read(located.size)
        except OSError as exc:
            raise DataFileError(f"{OP}: cannot read image {self.where(index)!r}: "
                                f"{exc.strerror or exc}") from None
        if len(data) != located.size:
            raise DataFileError(f"{OP}: image {self.where(index)!r} is shorter than when the "
                                "pipeline listed it")
        return [np.frombuffer(data, dtype=np.uint8).copy(), *self._index.annotations(index)]


@register_reader(OP)
def build_coco_reader(request: ReaderRequest) -> Reader:
    args = request.args
    paths = ReaderPaths(OP, request.roots, request.files)
    for argument in ("file_root", "annotations_file"):
        if not args[argument]:
            raise SpecError(OP, argument, "is required")
    if args["polygon_masks"] and args["pixelwise_masks"]:
        raise SpecError(OP, "pixelwise_masks", "and polygon_masks are mutually exclusive (as "
                                               "in DALI): set one")
    document_file = paths.locate(args["annotations_file"], "annotations file")
    document = _load_document(paths, document_file, request.limits)
    try:
        index = CocoIndex(document, CocoOptions.from_args(args), request.limits)
    except DocumentError as exc:
        raise InvalidArgument(f"{OP}: annotations file {paths.name_of(document_file)!r}: "
                              f"{exc}") from None
    del document
    if not index.names:
        raise InvalidArgument(f"{OP}: annotations file {paths.name_of(document_file)!r} "
                              "lists no image to read (skip_empty leaves out images without "
                              "annotations)")
    root = args["file_root"]
    images = paths.locate_all([os.path.join(root, name) for name in index.names], "image")
    identity = ReaderIdentity(paths, [document_file, *images], args["verify"],
                              derived=[index.digest()] + [""] * len(images), kind="file",
                              derived_name="annotations")
    return Reader(reader_stage(request, len(images), "images"),
                  CocoSource(index, images, paths, request.limits), identity, identity.count,
                  reads_objects=any(paths.is_object(image) for image in images))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@source_probe(OP)
def _coco() -> list[np.ndarray]:
    out = reader_orders(OP)
    document = {
        "images": [{"id": 9, "file_name": "b.jpg", "width": 40, "height": 30},
                   {"id": 2, "file_name": "a.jpg", "width": 64, "height": 48},
                   {"id": 5, "file_name": "c.jpg", "width": 10, "height": 10}],
        "categories": [{"id": 90}, {"id": 3}],
        "annotations": [
            {"image_id": 2, "category_id": 3, "bbox": [1.5, 2.0, 10.0, 4.0],
             "segmentation": [[1.5, 2.0, 11.5, 2.0, 11.5, 6.0]], "iscrowd": 0},
            {"image_id": 9, "category_id": 90, "bbox": [0.0, 0.0, 0.05, 3.0], "iscrowd": 0},
            {"image_id": 2, "category_id": 90, "bbox": [3.0, 1.0, 2.0, 2.0], "iscrowd": 1,
             "segmentation": {"counts": [100, 7, 40, 2925], "size": [48, 64]}},
            {"image_id": 9, "category_id": 3, "bbox": [5.0, 6.0, 7.0, 8.0],
             "segmentation": [[5.0, 6.0, 12.0, 6.0, 12.0, 14.0, 5.0, 14.0], [1.0, 1.0, 2.0,
                                                                           2.0, 1.0, 2.0]]}]}
    for flags in ({}, {"ltrb": True, "ratio": True, "polygon_masks": True, "image_ids": True},
                  {"skip_empty": True, "include_iscrowd": False, "size_threshold": 0.01},
                  {"avoid_class_remapping": True, "polygon_masks": True},
                  {"pixelwise_masks": True, "ratio": True}):
        args = {"ltrb": False, "ratio": False, "skip_empty": False, "size_threshold": 0.1,
                "include_iscrowd": True, "avoid_class_remapping": False,
                "polygon_masks": False, "pixelwise_masks": False, "image_ids": False, **flags}
        index = CocoIndex(document, CocoOptions.from_args(args), NO_LIMITS)
        for i in range(len(index.names)):
            out += index.annotations(i)
    return out
