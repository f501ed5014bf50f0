"""What DALI has and Conveyor does not, said as one error: ``NotSupported``.

``not_supported`` makes the error for a name the schemas, the pipeline arguments or
``types`` do not hold: it says that the name is not supported by Conveyor, offers the
close names (``difflib``) or, when none is close, what is supported, and names the page
that lists it. ``fn``, ``schema``, ``pipeline_def`` and ``types`` raise it where a DALI
script would go on, at definition time.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from conveyor.errors import NotSupported

#: The operator reference (every operator, reader and argument), as the docs link it.
OPERATORS_PAGE = "docs/reference/operators.md"
#: How Conveyor's pipeline object, constants and semantics differ from DALI's.
PORTING_PAGE = "docs/porting-from-dali.md"


def not_supported(subject: str, name: str, known: Iterable[str], *, op: str,
                  argument: str | None = None, page: str = OPERATORS_PAGE,
                  spell: str = "{}", suggest: bool = True) -> NotSupported:
    """The error for ``name``, one of what ``subject`` says (``"fn.rotate's argument"``):
    not supported by Conveyor, with the close names of ``known`` (else, or without
    ``suggest``: all of them), each written as ``spell`` formats it, and ``page``."""
    names = sorted(set(known))
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6) if suggest else []
    shown = ", ".join(spell.format(n) for n in (close or names))
    hint = f"did you mean {shown}?" if close else f"supported: {shown or 'none'}"
    return NotSupported(op, argument, f"{subject} {spell.format(name)} is not supported by "
                        f"Conveyor ({hint}); see {page}")


def unknown_operator(full_name: str, known: Iterable[str]) -> NotSupported:
    """For ``fn.<full_name>``: the close operators of its namespace (``readers`` for
    ``readers.tfrecord``), else all of them; for a namespace Conveyor lacks, the close
    operators of all (full names), else every top-level name."""
    names = sorted(set(known))
    prefix, _, last = full_name.rpartition(".")
    siblings = sorted(n.rpartition(".")[2] for n in names if n.rpartition(".")[0] == prefix)
    if siblings:
        close = [f"{prefix}.{n}" if prefix else n
                 for n in difflib.get_close_matches(last, siblings, n=3, cutoff=0.6)]
        others = [f"{prefix}.{n}" if prefix else n for n in siblings]
        if not prefix:  # the namespaces are top-level names too
            others = sorted({*others, *(n.split(".", 1)[0] for n in names)})
    else:
        close = difflib.get_close_matches(full_name, names, n=3, cutoff=0.6)
        others = sorted({n.split(".", 1)[0] for n in names})
    listed = ", ".join(f"fn.{n}" for n in (close or others))
    hint = f"did you mean {listed}?" if close else f"supported: {listed}"
    return NotSupported(full_name, None, f"unknown operator: fn.{full_name} is not supported "
                        f"by Conveyor ({hint}); see {OPERATORS_PAGE}")
