"""MkDocs hook: fills the reference pages from the code on every build (the operator
schemas and the server's configuration; see scripts/docs_reference.py), and fails the
build where the configuration page's hand-written meanings and the code disagree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docs_reference.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_reference", module)
    spec.loader.exec_module(module)
    return module


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    gen = _generator()
    if gen.CONFIGURATION_MARKER in markdown:
        mismatches = gen.configuration_mismatches(markdown)
        if mismatches:
            raise SystemExit(f"{page.file.src_path}: " + "; ".join(mismatches))
        markdown = markdown.replace(gen.CONFIGURATION_MARKER, gen.configuration_markdown())
    if gen.OPERATORS_MARKER in markdown:
        markdown = markdown.replace(gen.OPERATORS_MARKER, gen.operators_markdown())
    return markdown
