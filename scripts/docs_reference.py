"""The generated parts of the documentation site: the operator reference, from the operator
schemas (``conveyor.definition.schemas.registry.SCHEMAS``, which holds the readers', colour
operators' and sources' schemas too), and the configuration reference, from the server's
configuration dataclasses (``conveyor_server.app.config``) and its command-line flags.

``docs/hooks/reference.py`` calls these while MkDocs builds the site, so the reference pages
are made from the code on every build and cannot fall behind it. Run directly, this prints
both (``python scripts/docs_reference.py``).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Iterable
from typing import Any

from conveyor.definition.schemas import registry as schema
from conveyor.definition.schemas.args import Arg, OpSchema
from conveyor_server.app import config as server_config
from conveyor_server.app.main import FLAG_KEYS

#: Where each generated part goes in its page (an HTML comment, invisible if left in).
OPERATORS_MARKER = "<!-- generated: operators -->"
CONFIGURATION_MARKER = "<!-- generated: configuration -->"

#: Operator groups, in the order the page lists them: (title, test on the operator's name).
_GROUPS: tuple[tuple[str, typing.Callable[[str], bool]], ...] = (
    ("Readers", lambda name: name.startswith("readers.")),
    ("Decoders", lambda name: name.startswith("decoders.")),
    ("Random numbers", lambda name: name.startswith("random.")),
    ("Sources", lambda name: name == "external_source"),
    ("Colour", lambda name: name in schema.COLOR_SCHEMAS),
    ("Images and tensors", lambda name: True),
)
#: Flags that set a part of a key rather than the whole of it.
_PARTIAL_FLAGS = {"listen": ("--host", "--port")}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _number(value: float) -> str:
    """Whole numbers in full (16777216, not 1.67772e+07), others as Python prints them."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _allowed(arg: Arg) -> str:
    parts = []
    if arg.choices:
        parts.append(", ".join(f'`"{c}"`' if c else '`""`' for c in arg.choices))
    if arg.lengths:
        parts.append("length " + " or ".join(str(n) for n in arg.lengths))
    if arg.minimum is not None:
        parts.append(f"≥ {_number(arg.minimum)}")
    if arg.maximum is not None:
        parts.append(f"≤ {_number(arg.maximum)}")
    return "; ".join(parts)


def _default(arg: Arg) -> str:
    if arg.required:
        return "required"
    if arg.default is None:
        return "unset"
    return f"`{_value(arg.default)}`"


def _outputs(op: OpSchema) -> str:
    if op.outputs_from:
        return f"one per entry of `{op.outputs_from}`"
    if op.outputs_by is not None:
        return "by its arguments: " + ", ".join(f"`{o}`" for o in op.outputs)
    return ", ".join(f"`{o}`" for o in op.outputs) or "none"


def operator_section(name: str, op: OpSchema) -> str:
    """One operator: its inputs, outputs and devices, and a table of its arguments."""
    lines = [f"#### fn.{name}", "",
             f"Inputs: {op.inputs_text()}. Outputs: {_outputs(op)}. "
             f"Devices: {', '.join(f'`{d}`' for d in op.devices)}.", ""]
    if op.input_args:
        lines[-2] += " Optional inputs after those: " + ", ".join(
            f"`{a}` (the argument of that name)" for a in op.input_args) + "."
    if op.aliases:
        lines += ["Also: " + ", ".join(f"`fn.{a}`" for a in op.aliases) + ".", ""]
    if op.doc:
        lines += [op.doc, ""]
    if not op.args:
        return "\n".join([*lines, "No arguments.", ""])
    lines += ["| argument | kind | default | allowed | per sample |", "|---|---|---|---|---|"]
    for arg_name, arg in sorted(op.args.items()):
        lines.append(f"| `{arg_name}` | {arg.kind} | {_cell(_default(arg))} | "
                     f"{_cell(_allowed(arg))} | {'yes' if arg.tensor else ''} |")
    return "\n".join([*lines, ""])


def operators_markdown() -> str:
    """Every operator of ``conveyor.definition.schemas.registry.SCHEMAS``, grouped, with its
    arguments."""
    remaining = dict(schema.SCHEMAS)
    out = []
    for title, belongs in _GROUPS:
        names = sorted(n for n in remaining if belongs(n))
        if not names:
            continue
        out += [f"### {title}", ""]
        for name in names:
            out.append(operator_section(name, remaining.pop(name)))
    return "\n".join(out)


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return "list of " + _type_name(typing.get_args(hint)[0])
    members = server_config.union_args(hint)
    if len(members) > 1:
        named = " or ".join(_type_name(m) for m in members if m is not type(None))
        return named + (" or null" if type(None) in members else "")
    return str(getattr(hint, "__name__", hint))


def _field(path: str) -> tuple[dataclasses.Field[Any], Any]:
    """The dataclass field at a dotted path, and its default value."""
    owner: Any = server_config.ServerConfig()
    *parents, leaf = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    fields = {f.name: f for f in dataclasses.fields(owner)}
    return fields[leaf], getattr(owner, leaf)


def _bounds(field: dataclasses.Field[Any]) -> str:
    low, high = field.metadata.get("min"), field.metadata.get("max")
    parts = ([f"≥ {_number(low)}"] if low is not None else []) + \
        ([f"≤ {_number(high)}"] if high is not None else [])
    return ", ".join(parts)


def _flags() -> dict[str, list[str]]:
    by_key: dict[str, list[str]] = {}
    for dest, key in FLAG_KEYS.items():
        by_key.setdefault(key, []).append("--" + dest.replace("_", "-"))
    for key, flags in _PARTIAL_FLAGS.items():
        by_key.setdefault(key, []).extend(flags)
    return by_key


def config_keys() -> list[str]:
    """Every key of the configuration: the settable leaves and ``pipelines``."""
    return [*server_config.leaf_paths(), "pipelines"]


def configuration_markdown() -> str:
    """A table of every settable key: type, default, bounds, variable and flags."""
    flags = _flags()
    hints = server_config.leaf_paths()
    lines = ["| key | type | default | bounds | environment variable | flags |",
             "|---|---|---|---|---|---|"]
    for path, hint in hints.items():
        field, default = _field(path)
        shown = "null" if default is None else _value(default)
        lines.append(f"| `{path}` | {_cell(_type_name(hint))} | `{shown}` | {_bounds(field)} "
                     f"| `{server_config.env_name(path)}` | "
                     f"{', '.join(f'`{f}`' for f in flags.get(path, []))} |")
    lines.append("| `pipelines` | list of mappings (file only) | `[]` | | | |")
    return "\n".join(lines) + "\n"


def _expand(name: str) -> Iterable[str]:
    """``redis.tls.{ca_file,cert_file}`` -> ``redis.tls.ca_file``, ``redis.tls.cert_file``."""
    match = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", name)
    if match is None:
        yield name
        return
    for part in match.group(2).split(","):
        yield f"{match.group(1)}{part.strip()}{match.group(3)}"


def described_keys(page: str) -> set[str]:
    """The keys named in the first column of the page's hand-written table of meanings
    (rows starting ``| `key```; the flags in brackets after them are left out)."""
    keys: set[str] = set()
    for line in page.splitlines():
        if not line.startswith("| `"):
            continue
        first = re.sub(r"\([^)]*\)", "", line.split("|")[1])
        for name in re.findall(r"`([^`]+)`", first):
            keys.update(_expand(name))
    return keys


def configuration_mismatches(page: str) -> list[str]:
    """What the hand-written table says that the code does not, and the reverse."""
    known, described = set(config_keys()), described_keys(page)
    return [f"{key}: described in the configuration page, but no such key in "
            "conveyor_server/app/config.py" for key in sorted(described - known)] + \
        [f"{key}: a configuration key the configuration page does not describe: add a row "
         "to its table of meanings" for key in sorted(known - described)]


if __name__ == "__main__":
    print(operators_markdown())
    print(configuration_markdown())
