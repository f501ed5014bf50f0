"""The annotation document of ``fn.readers.coco`` (``coco.py``) read into flat arrays.

``CocoIndex`` checks every field the reader uses (a field of the wrong type is a
``DocumentError`` naming the entry, which the reader reports as INVALID_ARGUMENT), orders
the images as DALI does, keeps their annotations (boxes, labels, polygons and vertices,
RLE run lengths) in numpy arrays with each image's offsets, and slices one image's
outputs from them; ``pixelwise_masks`` are rasterised from those slices
(``coco_masks.py``). ``CocoOptions`` are the reader's arguments that shape the outputs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.readers.coco_masks import (
    boundary_steps,
    decode_rle_string,
    pixelwise_mask,
)


class DocumentError(ValueError):
    """What is wrong with the annotations document (the reader names the file)."""


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DocumentError(f"{what} must be an integer, got {value!r:.60}")
    if not -(1 << 31) <= value < (1 << 31):
        raise DocumentError(f"{what} = {value} does not fit in int32")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DocumentError(f"{what} must be a number, got {value!r:.60}")
    return float(value)


def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise DocumentError(f"{what} must be a list, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class CocoOptions:
    ltrb: bool
    ratio: bool
    skip_empty: bool
    size_threshold: float
    include_iscrowd: bool
    remap: bool
    polygons: bool
    image_ids: bool
    pixelwise: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> CocoOptions:
        return cls(bool(args["ltrb"]), bool(args["ratio"]), bool(args["skip_empty"]),
                   float(args["size_threshold"]), bool(args["include_iscrowd"]),
                   not args["avoid_class_remapping"], bool(args["polygon_masks"]),
                   bool(args["image_ids"]), bool(args["pixelwise_masks"]))


class CocoIndex:
    """The samples a document gives: each image's file name, id, and where its boxes,
    labels, polygons and vertices lie in the flat arrays."""

    def __init__(self, document: Any, options: CocoOptions, limits: EngineLimits) -> None:
        if not isinstance(document, dict):
            raise DocumentError("is not a JSON object")
        images = _list(document.get("images", []), "'images'")
        categories = _list(document.get("categories", []), "'categories'")
        annotations = _list(document.get("annotations", []), "'annotations'")
        labels_of: dict[int, int] = {}
        for i, category in enumerate(categories):
            if not isinstance(category, dict) or "id" not in category:
                raise DocumentError(f"categories[{i}] has no 'id'")
            labels_of.setdefault(_int(category["id"], f"categories[{i}].id"), i + 1)
        infos = []
        for i, image in enumerate(images):
            if not isinstance(image, dict):
                raise DocumentError(f"images[{i}] is not an object")
            for key in ("id", "file_name", "width", "height"):
                if key not in image:
                    raise DocumentError(f"images[{i}] has no {key!r}")
            name = image["file_name"]
            if not isinstance(name, str) or not name:
                raise DocumentError(f"images[{i}].file_name must be a non-empty string")
            width, height = (_int(image[k], f"images[{i}].{k}") for k in ("width", "height"))
            for option, wanted in (("ratio", options.ratio),
                                   ("pixelwise_masks", options.pixelwise)):
                if wanted and (width <= 0 or height <= 0):
                    raise DocumentError(f"images[{i}] is {width}x{height}: {option} needs a "
                                        "positive width and height")
            infos.append((_int(image["id"], f"images[{i}].id"), name, width, height))
        infos.sort(key=lambda info: info[0])
        by_id: dict[int, list[int]] = {info[0]: [] for info in infos}
        size_of = {info[0]: (info[3], info[2]) for info in infos}
        kept: list[tuple[np.ndarray, int, list[list[float]], list[int] | None]] = []
        for a, ann in enumerate(annotations):
            what = f"annotations[{a}]"
            if not isinstance(ann, dict):
                raise DocumentError(f"{what} is not an object")
            for key in ("image_id", "category_id", "bbox"):
                if key not in ann:
                    raise DocumentError(f"{what} has no {key!r}")
            image_id = _int(ann["image_id"], f"{what}.image_id")
            category = _int(ann["category_id"], f"{what}.category_id")
            given = _list(ann["bbox"], f"{what}.bbox")
            if len(given) != 4:
                raise DocumentError(f"{what}.bbox must hold 4 numbers, got {len(given)}")
            xywh = np.array([_number(v, f"{what}.bbox") for v in given], dtype=np.float32)
            if not options.include_iscrowd and _int(ann.get("iscrowd", 0),
                                                    f"{what}.iscrowd") != 0:
                continue
            if not (xywh[2] >= options.size_threshold and xywh[3] >= options.size_threshold):
                continue
            if image_id not in by_id:
                continue
            if options.remap:
                if category not in labels_of:
                    raise DocumentError(f"{what}.category_id {category} is not among the "
                                        "categories (set avoid_class_remapping to keep ids as "
                                        "written)")
                label = labels_of[category]
            else:
                label = category
            if options.pixelwise and label < 0:
                raise DocumentError(f"{what} has label {label}: pixelwise_masks needs labels "
                                    "of 0 or more")
            polygons: list[list[float]] = []
            rle: list[int] | None = None
            segmentation = ann.get("segmentation")
            if options.pixelwise and isinstance(segmentation, dict):
                rle = _rle_counts(segmentation, size_of[image_id], f"{what}.segmentation")
            if (options.polygons or options.pixelwise) and isinstance(segmentation, list):
                for p, polygon in enumerate(segmentation):
                    coords = [_number(v, f"{what}.segmentation[{p}]")
                              for v in _list(polygon, f"{what}.segmentation[{p}]")]
                    if len(coords) % 2:
                        raise DocumentError(f"{what}.segmentation[{p}] holds an odd number of "
                                            "coordinates")
                    polygons.append(coords)
            by_id[image_id].append(len(kept))
            kept.append((xywh, label, polygons, rle))
        names, ids, sizes = [], [], []
        box_rows, label_rows, poly_rows, vertex_rows = [], [], [], []
        rle_rows: list[tuple[int, int, int]] = []
        rle_counts: list[list[int]] = []
        box_ends, poly_ends, vertex_ends, rle_ends = [0], [0], [0], [0]
        counts_here = 0
        for image_id, name, width, height in infos:
            own = by_id[image_id]
            if options.skip_empty and not own:
                continue
            scale = np.array([width, height, width, height], dtype=np.float32)
            vertices_here = 0
            polys_here = 0
            rles_here = 0
            walk = 0
            for k, n in enumerate(own):
                xywh, label, polygons, rle = kept[n]
                box = xywh.copy()
                if options.ltrb:
                    box[2] += box[0]
                    box[3] += box[1]
                if options.ratio:
                    box = box / scale
                box_rows.append(box)
                label_rows.append(label)
                if rle is not None:
                    if sum(rle) != height * width:  # an image listed twice with one id
                        raise DocumentError(f"annotation {k} of image {name!r}: its RLE "
                                            f"covers {sum(rle)} pixels, the image has "
                                            f"{height * width}")
                    rle_rows.append((k, counts_here, counts_here + len(rle)))
                    rle_counts.append(rle)
                    counts_here += len(rle)
                    rles_here += 1
                for p, coords in enumerate(polygons):
                    v = np.array(coords, dtype=np.float32).reshape(-1, 2)
                    if options.pixelwise:
                        try:
                            walk += boundary_steps(v)
                        except ValueError as exc:
                            raise DocumentError(f"annotation {k} of image {name!r}: polygon "
                                                f"{p} {exc}") from None
                    if options.ratio and options.polygons:
                        v = v / scale[:2]
                    poly_rows.append((k, vertices_here, vertices_here + len(v)))
                    vertex_rows.append(v)
                    vertices_here += len(v)
                    polys_here += 1
            limits.check_output((len(own), 4), "float32", f"the boxes of image {name!r}")
            limits.check_output((vertices_here, 2), "float32",
                                f"the polygon vertices of image {name!r}")
            if options.pixelwise:
                limits.check_output((height, width, 1), "int32",
                                    f"the pixelwise mask of image {name!r}")
                limits.check_bytes(16 * walk, f"the boundary walk of image {name!r}'s polygons "
                                              f"({walk:,} points)")
            names.append(name)
            ids.append(image_id)
            sizes.append((width, height))
            box_ends.append(box_ends[-1] + len(own))
            poly_ends.append(poly_ends[-1] + polys_here)
            vertex_ends.append(vertex_ends[-1] + vertices_here)
            rle_ends.append(rle_ends[-1] + rles_here)
        self.names = names
        self.ids = np.array(ids, dtype=np.int32)
        self.boxes = (np.stack(box_rows).astype(np.float32) if box_rows
                      else np.zeros((0, 4), np.float32))
        self.labels = np.array(label_rows, dtype=np.int32)
        self.polygons = (np.array(poly_rows, dtype=np.int32).reshape(-1, 3))
        self.vertices = (np.concatenate(vertex_rows).astype(np.float32) if vertex_rows
                         else np.zeros((0, 2), np.float32))
        self.box_ends = np.array(box_ends, dtype=np.int64)
        self.poly_ends = np.array(poly_ends, dtype=np.int64)
        self.vertex_ends = np.array(vertex_ends, dtype=np.int64)
        self.sizes = np.array(sizes, dtype=np.int64).reshape(-1, 2)
        self.rles = np.array(rle_rows, dtype=np.int64).reshape(-1, 3)
        self.rle_counts = np.array([c for counts in rle_counts for c in counts], dtype=np.int64)
        self.rle_ends = np.array(rle_ends, dtype=np.int64)
        self.options = options

    def digest(self) -> str:
        """What was derived from the document: the samples and their annotations."""
        h = hashlib.sha256()
        h.update("\0".join(self.names).encode("utf-8", "surrogateescape"))
        for array in (self.ids, self.boxes, self.labels, self.polygons, self.vertices,
                      self.box_ends, self.poly_ends, self.vertex_ends, self.sizes, self.rles,
                      self.rle_counts, self.rle_ends):
            h.update(np.ascontiguousarray(array).tobytes())
        return h.hexdigest()

    def annotations(self, index: int) -> list[np.ndarray]:
        b0, b1 = int(self.box_ends[index]), int(self.box_ends[index + 1])
        out = [self.boxes[b0:b1].copy(), self.labels[b0:b1].copy()]
        if self.options.polygons:
            p0, p1 = int(self.poly_ends[index]), int(self.poly_ends[index + 1])
            v0, v1 = int(self.vertex_ends[index]), int(self.vertex_ends[index + 1])
            out += [self.polygons[p0:p1].copy(), self.vertices[v0:v1].copy()]
        if self.options.pixelwise:
            out.append(self.mask(index))
        if self.options.image_ids:
            out.append(self.ids[index:index + 1].copy())
        return out


    def mask(self, index: int) -> np.ndarray:
        """The image's pixelwise mask (``coco_masks.pixelwise_mask``)."""
        b0, b1 = int(self.box_ends[index]), int(self.box_ends[index + 1])
        labels = self.labels[b0:b1].tolist()
        polygons: list[list[np.ndarray]] = [[] for _ in labels]
        p0, p1 = int(self.poly_ends[index]), int(self.poly_ends[index + 1])
        v0 = int(self.vertex_ends[index])
        for k, start, end in self.polygons[p0:p1].tolist():
            polygons[k].append(self.vertices[v0 + start:v0 + end])
        rles: list[np.ndarray | None] = [None for _ in labels]
        r0, r1 = int(self.rle_ends[index]), int(self.rle_ends[index + 1])
        for k, start, end in self.rles[r0:r1].tolist():
            rles[k] = self.rle_counts[start:end]
        width, height = (int(v) for v in self.sizes[index])
        return pixelwise_mask(height, width, labels, polygons, rles)


def _rle_counts(segmentation: dict, size: tuple[int, int], what: str) -> list[int]:
    """The run lengths of an RLE segmentation, checked against the image's size."""
    shape = segmentation.get("size")
    if (not isinstance(shape, list) or len(shape) != 2
            or [_int(v, f"{what}.size") for v in shape] != list(size)):
        raise DocumentError(f"{what}.size must be the image's [height, width] = {list(size)}, "
                            f"got {shape!r:.60}")
    given = segmentation.get("counts")
    if isinstance(given, str):
        try:
            counts = decode_rle_string(given)
        except ValueError as exc:
            raise DocumentError(f"{what}.counts {exc}") from None
    elif isinstance(given, list):
        counts = [_int(v, f"{what}.counts") for v in given]
        if any(c < 0 for c in counts):
            raise DocumentError(f"{what}.counts holds a negative count")
    else:
        raise DocumentError(f"{what}.counts must be a string or a list of integers")
    if not counts or sum(counts) != size[0] * size[1]:
        raise DocumentError(f"{what}.counts cover {sum(counts)} pixels, the image has "
                            f"{size[0] * size[1]}")
    return counts
