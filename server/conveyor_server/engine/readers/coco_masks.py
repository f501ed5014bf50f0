"""``fn.readers.coco``'s ``pixelwise_masks``: one int32 mask per image, each pixel the label
of the object covering it, rasterised as DALI's reader does.

**Coordinates.** A mask is ``height x width`` of the image as the document lists it. Pixels
are addressed in column-major order (``x * height + y``), as COCO's run-length encodings
(RLE) are; every rule below is stated in that order.

**Polygons** follow the COCO toolbox's published rule (``rleFrPoly``), which DALI uses: each
vertex (its float32 value, as DALI keeps it) is scaled by 5 and truncated toward zero after
adding 0.5; each edge is walked one step per unit of its longer axis, the shorter axis
rounded the same way; a step that changes the scaled x from ``u0`` to ``u1`` marks a
boundary at column ``x = (min(u0, u1 - 1) + 0.5) / 5 - 0.5`` if that is a whole number
inside the image, and at row ``ceil((min(v0, v1) + 0.5) / 5 - 0.5)`` clamped to
``[0, height]``. A pixel is covered when an odd number of boundaries lie at or before it (in
column-major order). This module computes exactly that, vectorised with numpy.

**RLEs** (a ``segmentation`` object ``{"size": [h, w], "counts": ...}``) are run lengths
starting with a background run, given as a list of integers or as the toolbox's compressed
string (6 bits a character from ``'0'``; from the fourth count on, each is coded as its
difference from the count two before).

**Labels and overlaps** (DALI's reader, reproduced): an annotation's pixels are the union of
its polygons; all polygons of the annotations with the same label are merged into one mask;
a label with no polygon takes the last RLE given with that label (a label with polygons
ignores its RLEs). The labels are then painted in increasing order, a pixel covered by a
higher label taking it, except in the last run of the image: where the masks painted so far
and the next label's mask both end in one constant run, the pixels of that run keep the
lower label. If the lowest label of the image has no segmentation at all, the mask is all
zeros (DALI merges into that label's empty encoding). Label 0 paints nothing visible.
"""

from __future__ import annotations

import numpy as np

#: The toolbox's upsampling factor for polygon boundaries.
SCALE = 5
#: The largest scaled coordinate the toolbox's ``int`` arithmetic holds.
_INT_MAX = (1 << 31) - 1


def scaled_vertices(vertices: np.ndarray) -> np.ndarray:
    """The polygon's vertices scaled to boundary-walk units (int64, ``(k, 2)``); raises
    ValueError if a coordinate does not fit the toolbox's 32-bit arithmetic."""
    scaled = np.trunc(vertices.astype(np.float64) * SCALE + 0.5)
    if scaled.size and not np.all(np.abs(scaled) <= _INT_MAX // 2):
        raise ValueError("has a coordinate too large to rasterise")
    return scaled.astype(np.int64)


def boundary_steps(vertices: np.ndarray) -> int:
    """How many boundary points the walk around the polygon visits (the rasteriser's work
    and memory, bounded before it runs)."""
    scaled = scaled_vertices(vertices)
    if len(scaled) == 0:
        return 0
    closed = np.concatenate([scaled, scaled[:1]])
    delta = np.abs(np.diff(closed, axis=0))
    return int(np.sum(np.max(delta, axis=1) + 1))


def _walk(scaled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The boundary points of the closed polygon, edge after edge, both ends included."""
    closed = np.concatenate([scaled, scaled[:1]])
    xs, ys = closed[:-1, 0], closed[:-1, 1]
    xe, ye = closed[1:, 0], closed[1:, 1]
    dx, dy = np.abs(xe - xs), np.abs(ye - ys)
    along_x = dx >= dy
    steps = np.where(along_x, dx, dy)
    # Each edge is walked from its lower end (in the long axis), then its points are taken
    # in the edge's own direction.
    flip = (along_x & (xs > xe)) | (~along_x & (ys > ye))
    lx, ly = np.where(flip, xe, xs), np.where(flip, ye, ys)
    hx, hy = np.where(flip, xs, xe), np.where(flip, ys, ye)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(along_x, (hy - ly) / np.where(dx == 0, 1, dx),
                         (hx - lx) / np.where(dy == 0, 1, dy))
    edge = np.repeat(np.arange(len(xs)), steps + 1)
    first = np.concatenate([[0], np.cumsum(steps + 1)[:-1]])
    d = np.arange(len(edge)) - first[edge]
    t = np.where(flip[edge], steps[edge] - d, d)
    along = along_x[edge]
    across = np.trunc(np.where(along, ly[edge], lx[edge]) + slope[edge] * t + 0.5)
    u = np.where(along, t + lx[edge], across).astype(np.int64)
    v = np.where(along, across, t + ly[edge]).astype(np.int64)
    return u, v


def polygon_boundaries(vertices: np.ndarray, height: int, width: int) -> np.ndarray:
    """The column-major positions where the polygon's mask toggles (unsorted; a position
    may repeat, each occurrence toggling)."""
    scaled = scaled_vertices(vertices)
    if len(scaled) == 0:
        return np.zeros(0, np.int64)
    u, v = _walk(scaled)
    change = np.nonzero(u[1:] != u[:-1])[0] + 1
    u1, u0 = u[change], u[change - 1]
    xd = (np.where(u1 < u0, u1, u1 - 1).astype(np.float64) + 0.5) / SCALE - 0.5
    keep = (np.floor(xd) == xd) & (xd >= 0) & (xd <= width - 1)
    yd = (np.minimum(v[change], v[change - 1]).astype(np.float64) + 0.5) / SCALE - 0.5
    yd = np.ceil(np.clip(yd, 0, height))
    return xd[keep].astype(np.int64) * height + yd[keep].astype(np.int64)


def toggles_to_bits(positions: np.ndarray, size: int) -> np.ndarray:
    """Pixels (column-major, bool) covered by an odd number of toggles at or before them
    (counted only between the first toggle and the last: the work follows the polygon's
    extent, not the image's)."""
    bits = np.zeros(size, bool)
    positions = positions[positions < size]
    if len(positions):
        lo, hi = int(positions.min()), int(positions.max())
        hits = np.bincount(positions - lo, minlength=hi - lo + 1)
        bits[lo:hi + 1] = (np.cumsum(hits) & 1).astype(bool)
        bits[hi + 1:] = bits[hi]  # an odd count covers the rest
    return bits


def polygon_mask(vertices: np.ndarray, height: int, width: int) -> np.ndarray:
    """The polygon's pixels, column-major, bool."""
    return toggles_to_bits(polygon_boundaries(vertices, height, width), height * width)


def rle_bits(counts: np.ndarray, size: int) -> np.ndarray:
    """The pixels (column-major, bool) of run lengths that alternate from background."""
    values = np.arange(len(counts)) % 2 == 1
    return np.repeat(values, counts.astype(np.int64))[:size]


def decode_rle_string(text: str) -> list[int]:
    """The counts of the toolbox's compressed RLE string; raises ValueError on a malformed
    one (a character outside ``'0'..'o'``, a count cut short, a negative or too large
    count)."""
    counts: list[int] = []
    p = 0
    while p < len(text):
        value, shift = 0, 0
        while True:
            if p >= len(text):
                raise ValueError("ends inside a count")
            c = ord(text[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"holds {text[p]!r}, outside '0'..'o'")
            value |= (c & 0x1F) << shift
            p += 1
            shift += 5
            if not c & 0x20:
                if c & 0x10:
                    value -= 1 << shift
                break
            if shift > 35:
                raise ValueError("holds a count of more than 8 characters")
        if len(counts) > 2:
            value += counts[-2]
        if not 0 <= value < (1 << 32):
            raise ValueError(f"decodes to a count of {value}")
        counts.append(value)
    return counts


def last_run_start(bits: np.ndarray) -> int:
    """Where the constant run that ends the mask starts."""
    if len(bits) == 0:
        return 0
    other = np.nonzero(bits != bits[-1])[0]
    return int(other[-1]) + 1 if len(other) else 0


def pixelwise_mask(height: int, width: int, labels: list[int],
                   polygons: list[list[np.ndarray]], rles: list[np.ndarray | None]
                   ) -> np.ndarray:
    """The image's ``(height, width, 1)`` int32 mask from its annotations (in the document's
    order): each one's label, its polygons' vertices (pixels, float32) and its RLE counts
    (or None). The module's docstring states the rule."""
    size = height * width
    out = np.zeros(size, np.int32)
    if labels:
        per_label: dict[int, np.ndarray] = {}
        for label in sorted(set(labels)):
            own = [k for k, lab in enumerate(labels) if lab == label]
            shapes = [p for k in own for p in polygons[k]]
            if shapes:
                bits = np.zeros(size, bool)
                for vertices in shapes:
                    bits |= polygon_mask(vertices, height, width)
                per_label[label] = bits
            else:
                given = [counts for k in own if (counts := rles[k]) is not None]
                if given:
                    per_label[label] = rle_bits(given[-1], size)
        lowest = min(labels)
        if lowest in per_label:
            first = per_label.pop(lowest)
            out[first] = lowest
            tail = last_run_start(first)
            for label in sorted(per_label):
                bits = per_label[label]
                tail = max(tail, last_run_start(bits))
                painted = bits.copy()
                # The last run keeps a label already there.
                painted[tail:] &= out[tail:] == 0
                out[painted] = label
    return np.ascontiguousarray(out.reshape(width, height).T[:, :, None])
