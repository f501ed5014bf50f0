"""``fn.readers.coco(pixelwise_masks=True)``: DALI's label masks, byte for byte.

``fixtures/dali_coco_masks/expected.json`` holds the masks DALI 2.4's CPU reader gave for
the documents of ``tests/support/coco_masks_data.py`` (``scripts/dali_coco_masks.py``
recorded it). Beside that comparison: a mask worked out by hand, the vectorised rasteriser
against a step-by-step reading of the published rule (the COCO toolbox's polygon walk and
DALI's merge of run-length encodings, run by run), save/restore, and the refusals.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import InvalidArgument, ResourceExhausted, SpecError
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.readers.coco_masks import decode_rle_string, pixelwise_mask
from tests.support import coco_masks_data
from tests.support.resume import assert_resume_exact

EXPECTED = json.loads((Path(__file__).parent / "fixtures" / "dali_coco_masks" /
                       "expected.json").read_text())


@pipeline_def(batch_size=len(coco_masks_data.SIZES), seed=3, enable_checkpointing=True)
def masks_pipeline(file_root: str, annotations_file: str, **reader: Any) -> Any:
    return fn.readers.coco(file_root=file_root, annotations_file=annotations_file,
                           pixelwise_masks=True, image_ids=True, name="coco", **reader)


@pytest.mark.parametrize("case", EXPECTED["cases"],
                         ids=[f"{c['seed']}-{c['name']}" for c in EXPECTED["cases"]])
def test_masks_are_dalis_byte_for_byte(tmp_path: Path, case: dict) -> None:
    root, annotations = coco_masks_data.write(tmp_path, case["seed"])
    with Pipeline(masks_pipeline(root, annotations, **case["args"])) as pipe:
        _, _, labels, masks, ids = pipe.run()
    for s, want in enumerate(case["samples"]):
        mask = np.asarray(masks[s])
        assert int(np.asarray(ids[s])[0]) == want["id"]
        assert np.asarray(labels[s]).tolist() == want["labels"]
        assert (list(mask.shape), str(mask.dtype)) == (want["shape"], want["dtype"])
        assert coco_masks_data.mask_runs(mask) == want["runs"], f"image {want['id']}"


def _one_image(tmp_path: Path, width: int, height: int, annotations: list[dict],
               **reader: Any) -> np.ndarray:
    document = {"images": [{"id": 1, "file_name": "a.jpg", "width": width, "height": height}],
                "categories": [{"id": c} for c in (1, 2, 3)],
                "annotations": [{"image_id": 1, "bbox": [0, 0, 1, 1], **a}
                                for a in annotations]}
    (tmp_path / "a.jpg").write_bytes(b"a")
    (tmp_path / "a.json").write_text(json.dumps(document))

    @pipeline_def(batch_size=1)
    def one() -> Any:
        return fn.readers.coco(file_root=str(tmp_path), annotations_file=str(tmp_path / "a.json"),
                               pixelwise_masks=True, **reader)

    with Pipeline(one()) as pipe:
        mask = np.asarray(pipe.run()[3][0])
    assert mask.shape == (height, width, 1) and mask.dtype == np.int32
    return mask[:, :, 0]


def test_a_triangle_by_hand(tmp_path: Path) -> None:
    # Scaled by 5: (3, 3), (18, 3), (18, 13). The top edge steps right from u=3 to 18 at
    # v=3: columns x = (u + 0.5)/5 - 0.5 for u = 7, 12, 17 -> x = 1, 2, 3, at row
    # ceil(3.5/5 - 0.5) = 1. The long edge steps back from u=18 to 3 with
    # v = trunc(3 + t*10/15 + 0.5): at x=3 (u 18->17) min v = 12 -> row 2, at x=2 (u 13->12)
    # min v = 9 -> row ceil(1.4) = 2, at x=1 (u 8->7) min v = 6 -> row ceil(0.8) = 1, which
    # cancels the top edge's toggle there. Columns 2 and 3 are covered from row 1 to row 2.
    mask = _one_image(tmp_path, 6, 4, [
        {"category_id": 2, "segmentation": [[0.5, 0.5, 3.5, 0.5, 3.5, 2.5]]}])
    expected = np.zeros((4, 6), np.int32)
    expected[1, 2:4] = 2
    assert np.array_equal(mask, expected)


def test_rles_labels_and_overlaps_by_hand(tmp_path: Path) -> None:
    # 3 high, 2 wide; column-major runs. Label 1: pixels 1..3 (x=0,y=1..2; x=1,y=0).
    # Label 3 (compressed, from a count list [2, 2, 2]): pixels 2..3, over label 1 (the
    # higher label wins) except where both masks end in one run: label 3's last run starts
    # at 4 (background), label 1's at 4 too, so no pixel keeps the lower label here.
    one_rle: dict[str, Any] = {"size": [3, 2], "counts": [1, 3, 2]}
    three_rle: dict[str, Any] = {"size": [3, 2],
                                 "counts": coco_masks_data.encode_rle_string([2, 2, 2])}
    one = {"category_id": 1, "segmentation": one_rle}
    three = {"category_id": 3, "segmentation": three_rle}
    mask = _one_image(tmp_path, 2, 3, [one, three])
    assert mask.T.reshape(-1).tolist() == [0, 1, 3, 3, 0, 0]
    # Both masks reach the last pixel: the run they share at the end ([4, 6): label 1 from
    # 4, label 3 from 3) keeps the lower label; before it the higher one wins.
    one_rle["counts"] = [4, 2]
    three_rle["counts"] = coco_masks_data.encode_rle_string([3, 3])
    mask = _one_image(tmp_path, 2, 3, [one, three])
    assert mask.T.reshape(-1).tolist() == [0, 0, 0, 3, 1, 1]
    # Two RLEs of one label: the last one counts. A label with polygons ignores its RLEs.
    first = {"category_id": 2, "segmentation": {"size": [3, 2], "counts": [0, 6]}}
    last = {"category_id": 2, "segmentation": {"size": [3, 2], "counts": [5, 1]}}
    assert _one_image(tmp_path, 2, 3, [first, last]).T.reshape(-1).tolist() == \
        [0, 0, 0, 0, 0, 2]
    polygon = {"category_id": 2, "segmentation": [[-1, -1, 0.4, -1, 0.4, 0.4]]}
    assert not _one_image(tmp_path, 2, 3, [first, polygon]).any()
    # The lowest label without segmentation: DALI's merge starts from its empty encoding.
    bare = {"category_id": 1}
    assert not _one_image(tmp_path, 2, 3, [last, bare]).any()
    assert _one_image(tmp_path, 2, 3, [last]).sum() == 2


def test_compressed_counts_decode_as_the_toolbox_codes_them() -> None:
    for counts in ([6], [0, 6], [1, 3, 2], [5, 100000, 3, 7, 99999, 1], [31, 32, 15, 16, 0]):
        text = coco_masks_data.encode_rle_string(counts)
        assert decode_rle_string(text) == counts
    # By hand: one character a small count; the fourth count adds the second (2 + 1).
    assert decode_rle_string("5221") == [5, 2, 2, 3]
    for bad, message in (("5 ", "outside '0'..'o'"), ("o", "ends inside a count"),
                         ("0O", "decodes to a count of -1")):
        with pytest.raises(ValueError, match=message):
            decode_rle_string(bad)


# -- a step-by-step reading of the published rule, for the vectorised one -------------------


def _reference_polygon_runs(xy: list[float], h: int, w: int) -> list[int]:
    """Run lengths of the polygon, walking the rule one point at a time (float32 vertices,
    as the reader keeps them)."""
    pts = [float(np.float32(c)) for c in xy]
    k = len(pts) // 2
    xs = [math.trunc(5 * pts[2 * j] + 0.5) for j in range(k)]
    ys = [math.trunc(5 * pts[2 * j + 1] + 0.5) for j in range(k)]
    u: list[int] = []
    v: list[int] = []
    for j in range(k):
        x0, y0, x1, y1 = xs[j], ys[j], xs[(j + 1) % k], ys[(j + 1) % k]
        dx, dy = abs(x1 - x0), abs(y1 - y0)
        flip = (dx >= dy and x0 > x1) or (dx < dy and y0 > y1)
        if flip:
            x0, x1, y0, y1 = x1, x0, y1, y0
        n = dx if dx >= dy else dy
        s = ((y1 - y0) / dx if dx else 0.0) if dx >= dy else (x1 - x0) / dy
        for d in range(n + 1):
            t = n - d if flip else d
            if dx >= dy:
                u.append(t + x0)
                v.append(math.trunc(y0 + s * t + 0.5))
            else:
                v.append(t + y0)
                u.append(math.trunc(x0 + s * t + 0.5))
    points = []
    for j in range(1, len(u)):
        if u[j] == u[j - 1]:
            continue
        xd = ((u[j] if u[j] < u[j - 1] else u[j] - 1) + 0.5) / 5 - 0.5
        if math.floor(xd) != xd or xd < 0 or xd > w - 1:
            continue
        yd = (min(v[j], v[j - 1]) + 0.5) / 5 - 0.5
        yd = math.ceil(min(max(yd, 0), h))
        points.append(int(xd) * h + yd)
    positions = [*sorted(points), h * w]
    diffs = [b - a for a, b in zip([0, *positions[:-1]], positions, strict=True)]
    runs = [diffs[0]]
    j = 1
    while j < len(diffs):   # a zero step toggles twice: fold it with the next one
        if diffs[j] > 0:
            runs.append(diffs[j])
            j += 1
        else:
            j += 1
            if j < len(diffs):
                runs[-1] += diffs[j]
                j += 1
    return runs


def _union(a: list[int], b: list[int]) -> list[int]:
    bits = _bits(a) | _bits(b)
    return coco_masks_data.runs_of(bits)


def _bits(runs: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(runs)) % 2 == 1, runs)


def _reference_merge(h: int, w: int, labels: list[int], runs: dict[int, list[int]]
                     ) -> np.ndarray:
    """DALI's merge, run by run: the first label's runs, then each higher label's runs
    walked together with the runs so far; where both are set, the higher label wins
    unless the runs so far are exhausted at the end of the piece."""
    if min(labels) not in runs:
        return np.zeros(h * w, np.int32)
    lowest = min(labels)
    cnts = list(runs[lowest])
    vals = [lowest if i % 2 else 0 for i in range(len(cnts))]
    for label in sorted(set(labels) - {lowest}):
        if label not in runs:
            continue
        b = runs[label]
        ia, ib, ca, cb = 1, 1, cnts[0], b[0]
        va = next_va = vals[0]
        vb = next_vb = False
        out_c: list[int] = []
        out_v: list[int] = []
        while True:
            c = min(ca, cb)
            ca -= c
            if not ca and ia < len(cnts):
                ca, next_va = cnts[ia], vals[ia]
                ia += 1
            cb -= c
            if not cb and ib < len(b):
                cb = b[ib]
                ib += 1
                next_vb = not next_vb
            if va and vb:
                out_v.append(va if not ca else label)
            else:
                out_v.append(va if va else (label if vb else 0))
            out_c.append(c)
            va, vb = next_va, next_vb
            if ca == 0:
                break
        cnts, vals = out_c, out_v
    return np.repeat(np.array(vals, np.int32), cnts)


def test_the_rasteriser_is_the_published_rule_step_by_step() -> None:
    rng = np.random.default_rng(5)
    for trial in range(60):
        h, w = int(rng.integers(1, 30)), int(rng.integers(1, 30))
        labels = [int(v) for v in rng.integers(0, 4, int(rng.integers(1, 5)))]
        polygons: list[list[np.ndarray]] = []
        rles: list[np.ndarray | None] = []
        runs: dict[int, list[int]] = {}
        rle_runs: dict[int, list[int]] = {}
        for label in labels:
            kind = rng.integers(0, 4)
            if kind == 0:   # no segmentation
                polygons.append([])
                rles.append(None)
            elif kind == 1:
                bits = rng.random(h * w) < rng.random()
                counts = coco_masks_data.runs_of(bits)
                polygons.append([])
                rles.append(np.array(counts))
                rle_runs[label] = counts
            else:
                shapes = []
                for _ in range(int(rng.integers(1, 3))):
                    k = int(rng.integers(1, 7))
                    xy = rng.uniform(-4, max(h, w) + 4, 2 * k).round(int(rng.integers(0, 3)))
                    shapes.append(np.asarray(xy, np.float32).reshape(-1, 2))
                    one = _reference_polygon_runs(xy.tolist(), h, w)
                    runs[label] = _union(runs[label], one) if label in runs else one
                polygons.append(shapes)
                rles.append(None)
        for label, counts in rle_runs.items():
            runs.setdefault(label, counts)
        expected = _reference_merge(h, w, labels, runs).reshape(w, h).T
        got = pixelwise_mask(h, w, labels, polygons, rles)[:, :, 0]
        assert np.array_equal(got, expected), f"trial {trial}"


# -- save/restore and refusals -----------------------------------------------------------------


def test_masks_resume_exactly_from_a_checkpoint(tmp_path: Path) -> None:
    root, annotations = coco_masks_data.write(tmp_path, 12)
    spec = masks_pipeline(root, annotations, random_shuffle=True, batch_size=3)
    assert_resume_exact(spec, 2, 3)


@pytest.mark.parametrize(("change", "message"), [
    (lambda a: a.update(segmentation={"size": [3, 4], "counts": [12]}),
     r"annotations\[0\].segmentation.size must be the image's \[height, width\] = \[4, 3\]"),
    (lambda a: a.update(segmentation={"size": [4, 3], "counts": [5, 5]}),
     r"annotations\[0\].segmentation.counts cover 10 pixels, the image has 12"),
    (lambda a: a.update(segmentation={"size": [4, 3], "counts": "1 "}),
     r"annotations\[0\].segmentation.counts holds ' ', outside"),
    (lambda a: a.update(segmentation={"size": [4, 3], "counts": [13, -1]}),
     r"annotations\[0\].segmentation.counts holds a negative count"),
    (lambda a: a.update(segmentation=[[0, 0, 1e9, 0, 1, 1]]),
     r"annotation 0 of image 'a.jpg': polygon 0 has a coordinate too large"),
    (lambda a: a.update(category_id=-2),
     r"annotations\[0\] has label -2: pixelwise_masks needs labels of 0 or more"),
])
def test_malformed_segmentations_are_refused_naming_them(tmp_path: Path, change: Any,
                                                         message: str) -> None:
    annotation = {"category_id": 1, "segmentation": [[0, 0, 2, 0, 2, 2]]}
    change(annotation)
    with pytest.raises(InvalidArgument, match=message):
        _one_image(tmp_path, 3, 4, [annotation], avoid_class_remapping=True)


def _document(tmp_path: Path, width: int, height: int, annotation: dict) -> tuple[str, str]:
    document = {"images": [{"id": 1, "file_name": "a.jpg", "width": width, "height": height}],
                "categories": [{"id": 1}],
                "annotations": [{"image_id": 1, "bbox": [0, 0, 1, 1], "category_id": 1,
                                 **annotation}]}
    (tmp_path / "a.jpg").write_bytes(b"a")
    (tmp_path / "a.json").write_text(json.dumps(document))
    return str(tmp_path), str(tmp_path / "a.json")


def test_masks_are_bounded_and_exclusive_with_polygons(tmp_path: Path) -> None:
    root, annotations = _document(tmp_path, 100, 80, {
        "segmentation": {"size": [80, 100], "counts": [10, 7990]}})
    with pytest.raises(SpecError, match="pixelwise_masks.*mutually exclusive"):
        Pipeline(masks_pipeline(root, annotations, polygon_masks=True, batch_size=1))
    with pytest.raises(ResourceExhausted, match=r"the pixelwise mask of image 'a.jpg' would "
                                                r"be 80x100x1 int32 = 32,000 bytes"):
        Pipeline(masks_pipeline(root, annotations, batch_size=1),
                 limits=EngineLimits(max_batch_bytes=20_000))
    root, annotations = _document(tmp_path, 9, 9, {
        "segmentation": [[0, 0, 4000, 0, 4000, 4000]]})
    with pytest.raises(ResourceExhausted, match=r"the boundary walk of image 'a.jpg''s "
                                                r"polygons \(60,003 points\)"):
        Pipeline(masks_pipeline(root, annotations, batch_size=1),
                 limits=EngineLimits(max_batch_bytes=500_000))
