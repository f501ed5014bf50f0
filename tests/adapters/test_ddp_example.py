"""``client/examples/ddp_train.py`` run by torchrun (gloo, CPU) against real servers: two
ranks train and save at step 4, die after step 5; three ranks resume from the saved state.
The labels every rank received, step by step, are the one-rank pipeline's in order: the
global sequence, each sample of an epoch once across the resize."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from conveyor_server.engine.pipeline import Pipeline
from tests.support.servers import Start

EXAMPLE = Path(__file__).resolve().parents[2] / "client" / "examples" / "ddp_train.py"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torchrun(ranks: int, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={ranks}", str(EXAMPLE), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def received(record: Path, world: int) -> tuple[int, list[list[list[int]]]]:
    """The first step of a run and, per rank, the labels of each of its steps."""
    runs = [json.loads((record / f"rank-{r}-of-{world}.json").read_text())
            for r in range(world)]
    assert len({run["first_step"] for run in runs}) == 1
    return runs[0]["first_step"], [run["labels"] for run in runs]


def test_the_ddp_example_resumes_with_another_world_size(start_server: Start,
                                                         image_root: Path,
                                                         tmp_path: Path) -> None:
    a, b = start_server.many(2)
    common = ["--servers", f"{a.address},{b.address}", "--data", str(image_root / "imgs"),
              "--job", "ddp", "--save-every", "4", "--state", str(tmp_path / "state.pt")]
    torchrun(2, *common, "--steps", "5", "--record", str(tmp_path / "two"))
    torchrun(3, *common, "--steps", "8", "--record", str(tmp_path / "three"))

    first, two = received(tmp_path / "two", 2)
    resumed, three = received(tmp_path / "three", 3)
    assert (first, resumed) == (0, 4)  # the second run went on from the saved step 4
    # Global batches: steps 0-3 of two ranks (0..7), then steps 4-7 of three (8..19).
    history = [two[r][s] for s in range(4) for r in range(2)]
    history += [three[r][s] for s in range(4) for r in range(3)]
    with Pipeline(example().train_pipeline(str(image_root / "imgs"))) as one_rank:
        expected = [one_rank.run()[1].as_array().reshape(-1).tolist() for _ in range(20)]
    assert history == expected
