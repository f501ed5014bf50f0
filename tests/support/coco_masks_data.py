"""A COCO document for ``pixelwise_masks``: random polygons (fractional, overlapping, past
the image's edges, several to an annotation, several annotations to a label) and RLEs
(count lists and compressed strings, some starting on a foreground pixel), with the cases
DALI's rule singles out: a label with both polygons and RLEs, two RLEs of one label, an
image whose lowest label has no segmentation, masks that overlap in the image's last run,
an image without annotations. Shared by the DALI recording script
(``scripts/dali_coco_masks.py``) and the tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: Category ids in the document's order (labels 1..5 after remapping).
CATEGORIES = (3, 9, 1, 20, 7)
#: (width, height) of each image, in id order.
SIZES = ((23, 17), (40, 31), (64, 48), (31, 40), (17, 23), (50, 50), (12, 9), (33, 21),
         (48, 36), (29, 29))


def encode_rle_string(counts: list[int]) -> str:
    """The COCO toolbox's compressed form of run lengths: from the fourth count on, each is
    coded as its difference from the count two before; every value in 5-bit groups, low
    first, 0x20 marking that more follow, the last group's 0x10 its sign, plus 48."""
    out = []
    for i, count in enumerate(counts):
        value = count - counts[i - 2] if i > 2 else count
        while True:
            group = value & 0x1F
            value >>= 5
            more = value != -1 if group & 0x10 else value != 0
            out.append(chr(48 + (group | (0x20 if more else 0))))
            if not more:
                break
    return "".join(out)


def runs_of(bits: np.ndarray) -> list[int]:
    """Run lengths (from a background run) of column-major bits."""
    flat = bits.astype(np.int8)
    edges = np.nonzero(np.diff(flat))[0] + 1
    bounds = np.concatenate([[0], edges, [len(flat)]])
    counts = np.diff(bounds).tolist()
    return [0, *counts] if len(flat) and flat[0] else counts


def _polygon(rng: np.random.Generator, width: int, height: int) -> list[float]:
    k = int(rng.integers(3, 9))
    xs = rng.uniform(-3, width + 3, k)
    ys = rng.uniform(-3, height + 3, k)
    # Some coordinates on tenths and halves, where the rasteriser's rounding ties.
    step = rng.choice([0.01, 0.1, 0.5])
    return [float(round(v / step) * step) for pair in zip(xs, ys, strict=True) for v in pair]


def _rle(rng: np.random.Generator, width: int, height: int, compressed: bool,
         foreground_first: bool) -> dict:
    bits = np.zeros((height, width), bool)
    for _ in range(int(rng.integers(1, 4))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        bits[y0:y0 + int(rng.integers(1, height)), x0:x0 + int(rng.integers(1, width))] = True
    bits[0, 0] = foreground_first
    counts = runs_of(bits.T.reshape(-1))
    return {"size": [height, width],
            "counts": encode_rle_string(counts) if compressed else counts}


def document(seed: int = 11) -> dict:
    rng = np.random.default_rng(seed)
    images = [{"id": i + 1, "file_name": f"m{i + 1:02d}.jpg", "width": w, "height": h}
              for i, (w, h) in enumerate(SIZES)]
    annotations: list[dict] = []

    def add(image: dict, category: int, segmentation: object = None, iscrowd: int = 0) -> None:
        ann: dict = {"id": len(annotations) + 1, "image_id": image["id"],
                     "category_id": category, "bbox": [0.0, 0.0, 5.0, 5.0],
                     "iscrowd": iscrowd}
        if segmentation is not None:
            ann["segmentation"] = segmentation
        annotations.append(ann)

    for n, (image, (w, h)) in enumerate(zip(images, SIZES, strict=True)):
        if n == 6:
            continue  # no annotations: an all-zero mask
        for a in range(int(rng.integers(2, 6))):
            category = CATEGORIES[int(rng.integers(0, len(CATEGORIES)))]
            if (n + a) % 4 == 3:
                add(image, category, _rle(rng, w, h, compressed=a % 2 == 0,
                                          foreground_first=n % 3 == 0), iscrowd=1)
            else:
                add(image, category, [_polygon(rng, w, h)
                                      for _ in range(1 + int(rng.integers(0, 3)))])
        if n == 1:  # one label with polygons and an RLE (the polygons win)
            add(image, CATEGORIES[2], _rle(rng, w, h, True, False), iscrowd=1)
            add(image, CATEGORIES[2], [_polygon(rng, w, h)])
        if n == 2:  # two RLEs of one label (the last wins)
            add(image, CATEGORIES[4], _rle(rng, w, h, False, False), iscrowd=1)
            add(image, CATEGORIES[4], _rle(rng, w, h, True, True), iscrowd=1)
        # An annotation without segmentation follows a polygon one: DALI leaves its kind of
        # segmentation unset, and after an RLE one it crashes.
        if n == 3:  # the lowest label has no segmentation: DALI's mask stays all zeros
            add(image, CATEGORIES[1], [_polygon(rng, w, h)])
            add(image, CATEGORIES[2])
        if n in (4, 9):  # two labels covering the whole image overlap in its last run
            add(image, CATEGORIES[1], [[-1, -1, w + 1, -1, w + 1, h + 1, -1, h + 1]])
            add(image, CATEGORIES[3], [[w / 2, h / 3, w + 2, h / 3, w + 2, h + 2, w / 2,
                                        h + 2]])
        if n == 5:  # an annotation without segmentation on a higher label changes nothing
            add(image, CATEGORIES[1], [_polygon(rng, w, h)])
            add(image, CATEGORIES[3])
    categories = [{"id": c, "name": f"c{c}"} for c in CATEGORIES]
    return {"images": images, "annotations": annotations, "categories": categories}


def write(folder: Path, seed: int = 11) -> tuple[str, str]:
    """The images (a few bytes each: the reader does not decode them) and the annotations
    file under ``folder``; (file_root, annotations_file)."""
    doc = document(seed)
    root = folder / "images"
    root.mkdir(parents=True, exist_ok=True)
    for image in doc["images"]:
        (root / image["file_name"]).write_bytes(b"image %d" % image["id"])
    annotations = folder / "annotations.json"
    annotations.write_text(json.dumps(doc))
    return str(root), str(annotations)


def mask_runs(mask: np.ndarray) -> list[list[int]]:
    """A mask (H, W, 1) as ``[value, length]`` runs over its row-major pixels (the form the
    DALI fixture keeps)."""
    flat = np.asarray(mask).reshape(-1)
    if flat.size == 0:
        return []
    edges = np.nonzero(np.diff(flat))[0] + 1
    starts = np.concatenate([[0], edges])
    lengths = np.diff(np.concatenate([starts, [flat.size]]))
    return [[int(flat[s]), int(n)] for s, n in zip(starts, lengths, strict=True)]
