"""What the documentation needs to build, and what the pages promise about installing:
``make docs`` installs the runtime and MkDocs with its theme (at server[test]'s pins), not
the whole test environment; no page or message tells a user to ``pip install`` Conveyor's
distributions from an index, which has neither (a clone's ``./client``/``./server`` or
built wheels); the README says how to keep torch's CPU build for the ``torch`` extra."""

from __future__ import annotations

import re
import tomllib

from tests.project.test_deploy import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()


def rule(target: str) -> tuple[list[str], str]:
    """The prerequisites and recipe of ``target`` in the Makefile."""
    found = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert found, f"Makefile: no rule for {target}"
    return found[1].split(), found[2]


def test_make_docs_installs_the_runtime_and_the_docs_tools_not_the_test_environment() -> None:
    prerequisites, _ = rule("docs")
    assert prerequisites == ["$(DOCS_STAMP)"], prerequisites
    stamp_prerequisites, recipe = rule("$(DOCS_STAMP)")
    assert "$(STAMP)" in stamp_prerequisites and "$(TEST_STAMP)" not in stamp_prerequisites
    installs = [line for line in recipe.splitlines() if " install " in line]
    assert len(installs) == 1 and "$(DOCS_TOOLS)" in installs[0], installs
    assert "./server" not in installs[0] and "[test]" not in installs[0]

    tools = re.search(r"^DOCS_TOOLS := (.*)$", MAKEFILE, re.MULTILINE)
    assert tools, "Makefile: no DOCS_TOOLS"
    pyproject = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())
    test_pins = {r for r in pyproject["project"]["optional-dependencies"]["test"]
                 if r.startswith("mkdocs")}
    assert set(tools[1].split()) == test_pins, "the docs tools are the versions tests build with"


#: ``pip install`` of Conveyor's distributions by name, as from an index.
FROM_AN_INDEX = re.compile(r"pip install\s+(?:-\S+\s+)*['\"]?conveyor(?:-server)?(?:\[|['\"`\s]|$)")


def test_no_page_or_message_installs_conveyor_from_an_index() -> None:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "client" / "conveyor").rglob("*.py")),
             *sorted((ROOT / "server" / "conveyor_server").rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}: {match[0]!r}" for path in texts
             for match in FROM_AN_INDEX.finditer(path.read_text())]
    assert not found, "\n".join(found)


def test_the_readme_says_how_to_keep_torchs_cpu_build() -> None:
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        text = page.read_text()
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text
        assert "pip install -e './client[torch]'" in text, "the editable client stays editable"
