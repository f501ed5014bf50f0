"""The documentation site builds strictly (a broken link or anchor, or a page left out of the
navigation, fails it), and its reference pages are made from the code at build time."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conveyor.definition.schemas import registry as schema
from conveyor_server.app import config as server_config

ROOT = Path(__file__).resolve().parents[2]


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` (not ``--quiet``: it hides the warnings strict counts)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        check=False, cwd=root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference",
                                                  ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = build(ROOT, site)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}{done.stderr}"
    return site


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "getting-started" / "index.html").is_file()


def test_the_operator_reference_lists_every_operator_and_argument(site: Path) -> None:
    page = (site / "reference" / "operators" / "index.html").read_text()
    for name, op in schema.SCHEMAS.items():
        assert f"fn.{name}</h4>" in page or f"fn.{name}<a" in page, name
        for arg in op.args:
            assert f"<code>{arg}</code>" in page, (name, arg)


def test_the_configuration_reference_lists_every_key(site: Path) -> None:
    page = (site / "reference" / "configuration" / "index.html").read_text()
    for key in server_config.leaf_paths():
        assert f"<code>{key}</code>" in page, key
        assert f"<code>{server_config.env_name(key)}</code>" in page, key


def test_a_configuration_key_without_a_meaning_is_reported() -> None:
    gen = generator()
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert gen.configuration_mismatches(page) == []
    row = next(line for line in page.splitlines() if line.startswith("| `drain.grace_s`"))
    problems = gen.configuration_mismatches(
        page.replace(row, row.replace("`drain.grace_s`", "`drain.grace`")))
    assert any(p.startswith("drain.grace:") for p in problems), problems
    assert any(p.startswith("drain.grace_s:") for p in problems), problems


def test_a_page_missing_from_the_navigation_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    (copy / "docs" / "orphan.md").write_text("# Orphan\n\nIn no navigation.\n")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0
    assert "orphan.md" in done.stdout + done.stderr


def test_the_readme_links_into_pages_and_anchors_that_exist(site: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+\.md)(#[^)]+)?\)", readme)
    assert links, "the README links into docs/"
    for page, anchor in links:
        assert (ROOT / page).is_file(), page
        if anchor:
            built = site / page.removeprefix("docs/").removesuffix(".md") / "index.html"
            if page == "docs/index.md":
                built = site / "index.html"
            assert f'id="{anchor[1:]}"' in built.read_text(), f"{page}{anchor}"
