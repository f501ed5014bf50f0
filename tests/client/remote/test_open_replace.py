"""``Client.open(..., replace=True)``: a new spec under an old name replaces the pipeline
(deleted with its checkpoints, which are positions of another spec) where a plain open is
refused with a SpecMismatch that names ``replace=True``."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, client


def test_a_new_spec_replaces_the_old_one_under_its_name(start_server: Start,
                                                        image_root: Path) -> None:
    server = start_server()
    old = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    new = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    with client(server) as c:
        first = c.open("model-data", old, run_id="r")
        first.run(), first.run()
        saved = first.checkpoint()
        with pytest.raises(errors.SpecMismatch, match="open it with replace=True"):
            c.open("model-data", new, run_id="r")

        replaced = c.open("model-data", new, run_id="r", replace=True)
        assert replaced.consumed == 0 and replaced.info.spec.batch_size == 3
        assert batch_bytes(replaced.run()) == reference(new, 1)[0]
        replaced.checkpoint()
        ids = {ck.id for ck in c.checkpoints("model-data")}
        assert saved.id not in ids, "the old spec's positions are gone"
        again = c.open("model-data", new, run_id="r", replace=True)  # same spec: goes on
        assert again.info.spec.batch_size == 3 and again.consumed == 1
        assert batch_bytes(again.run()) == reference(new, 2)[1]
