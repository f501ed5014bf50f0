"""The README's examples, run as a new user runs them: ``make demo``'s program, and the
trainer of "A trainer, in 20 lines" run twice against a real server and Redis on loopback.
What they print must be what the README shows (paths, ports and checkpoint nonces aside),
so the README cannot drift from the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor_server.store.redis_process import RedisProcess
from tests.support.servers import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
#: How far the demo's checkpoint size may be from the README's, once the length of the data
#: path (which the spec inside the checkpoint holds) is taken out: the checkpoint also records
#: the CPU description (the SIMD paths numpy and OpenCV dispatch to), whose length differs
#: between machines: an AMD EPYC without AVX-512 gives a checkpoint 23 bytes smaller than
#: the README's machine. A checkpoint grown by more than this still fails the test.
CHECKPOINT_BYTES_SLACK = 48


def fenced_blocks(markdown: str) -> list[tuple[str, str, str]]:
    """Every fenced block: (the heading above it, its info string, its text)."""
    blocks = []
    heading = ""
    lines = iter(markdown.splitlines())
    for line in lines:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("```"):
            body = []
            for inner in lines:
                if inner.startswith("```"):
                    break
                body.append(inner)
            blocks.append((heading, line[3:].strip(), "\n".join(body) + "\n"))
    return blocks


def section_blocks(path: Path, heading: str) -> list[tuple[str, str]]:
    blocks = [(info, text) for h, info, text in fenced_blocks(path.read_text())
              if h == heading]
    assert blocks, f"{path.name}: no code block under the heading {heading!r}"
    return blocks


def quickstart(path: Path) -> tuple[str, str]:
    """The trainer (the python block) and the output the page shows for two runs."""
    blocks = section_blocks(path, "A trainer, in 20 lines")
    code = [text for info, text in blocks if info == "python"]
    output = [text for info, text in blocks if info == "" and "opened at batch" in text]
    assert len(code) == 1 and len(output) == 1, \
        f"{path.name}: want one python block and one block of its output for two runs"
    return code[0], output[0]


def demo_output(path: Path) -> str:
    blocks = section_blocks(path, "The two commands")
    shown = [text for _, text in blocks if text.startswith("Conveyor demo:")]
    assert len(shown) == 1, f"{path.name}: want one block of the demo's output"
    return shown[0]


def without_nonces(text: str) -> str:
    return re.sub(r"(:\d+)-[0-9a-f]{16}\b", r"\1-<nonce>", text)


def demo_shape(text: str) -> tuple[str, int]:
    """The demo's output with paths, ports and nonces masked, and its checkpoint's size less
    the length of the data path it holds."""
    size = re.search(r"after batch \d+, (\d+) bytes", text)
    data = re.search(r"^  data +(\S+) ", text, re.M)
    assert size is not None and data is not None, text
    text = text.replace(size.group(0), "after batch N, <size> bytes")
    text = re.sub(r"(unix://)?/[^\s()]*", "<path>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    return without_nonces(text), int(size.group(1)) - len(data.group(1))


def run(args: list[str], cwd: Path) -> str:
    done = subprocess.run([sys.executable, *args], check=False, cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stderr}"
    return done.stdout


@pytest.fixture
def demo_dir(tmp_path: Path) -> tuple[Path, str]:
    """``make demo``'s program, run into a temporary folder; its output."""
    out = tmp_path / "demo-out"
    return out, run(["-m", "conveyor_server.demo.run", "--out", str(out)], tmp_path)


def test_the_demo_prints_what_the_readme_shows(demo_dir: tuple[Path, str]) -> None:
    _, printed = demo_dir
    shown, shown_size = demo_shape(demo_output(README))
    got, got_size = demo_shape(printed)
    assert got == shown
    assert abs(got_size - shown_size) <= CHECKPOINT_BYTES_SLACK, (got_size, shown_size)


def test_the_readme_trainer_survives_being_run_twice(demo_dir: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    out, _ = demo_dir
    code, shown = quickstart(README)
    trainer = tmp_path / "trainer.py"
    trainer.write_text(code)
    redis_proc = RedisProcess(appendonly=True)
    redis_proc.start()
    server = ServerProcess(redis_proc.url, [out], tmp_path)
    try:
        server.start()
        # As the README says: run from the folder holding demo-out, with a relative path.
        runs = [run([str(trainer), server.address, "demo-out/data"], out.parent)
                for _ in range(2)]
    finally:
        server.stop()
        redis_proc.cleanup()
    first_id, second_id = (re.findall(r"checkpoint (\S+) after", r)[0] for r in runs)
    assert first_id != second_id
    assert without_nonces("".join(runs)) == without_nonces(shown)


def test_getting_started_shows_the_readme_quickstart() -> None:
    assert quickstart(GETTING_STARTED) == quickstart(README)
    assert demo_output(GETTING_STARTED) == demo_output(README)
