"""Record the pixelwise masks DALI's ``fn.readers.coco`` gives, for the comparison test
(``tests/engine/test_readers_coco_masks.py``).

Run with an interpreter that has DALI (numpy and DALI alone are needed):

    /path/to/dali-venv/bin/python scripts/dali_coco_masks.py > \\
        tests/engine/fixtures/dali_coco_masks/expected.json

It writes the document of ``tests/support/coco_masks_data.py`` (for each seed of
``SEEDS``) into a temporary folder, reads every image with ``pixelwise_masks=True`` in each
case of ``CASES`` on DALI's CPU (``device_id=None``), and prints each mask's shape, dtype
and its ``[value, length]`` runs over its row-major pixels, with the labels and image ids.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import coco_masks_data  # noqa: E402

SEEDS = (11, 12, 13)
#: (name, reader arguments) besides ``pixelwise_masks`` and ``image_ids``.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("plain", {}),
    ("no_remapping", {"avoid_class_remapping": True}),
    ("no_crowds_ltrb", {"include_iscrowd": False, "ltrb": True}),
]


def main() -> None:
    import numpy as np
    from nvidia.dali import fn, pipeline_def

    out: dict[str, Any] = {"seeds": SEEDS, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in SEEDS:
            file_root, annotations = coco_masks_data.write(Path(tmp, str(seed)), seed)
            count = len(coco_masks_data.SIZES)
            for name, args in CASES:
                @pipeline_def(batch_size=count, num_threads=1, device_id=None, seed=5)
                def pipe(options: dict[str, Any], root: str, document: str) -> Any:
                    return tuple(fn.readers.coco(file_root=root, annotations_file=document,
                                                 pixelwise_masks=True, image_ids=True,
                                                 **options))

                p = pipe(options=args, root=file_root, document=annotations)
                p.build()
                _, _, labels, masks, ids = p.run()
                samples = []
                for s in range(count):
                    mask = np.array(masks[s])
                    samples.append({"id": int(np.array(ids[s])[0]),
                                    "labels": np.array(labels[s]).tolist(),
                                    "shape": list(mask.shape), "dtype": str(mask.dtype),
                                    "runs": coco_masks_data.mask_runs(mask)})
                out["cases"].append({"seed": seed, "name": name, "args": args,
                                     "samples": samples})
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
