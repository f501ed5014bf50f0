"""Describing a closure over plain data so another process rebuilds it, without pickle.

A function whose code lives in an importable module, and whose free variables and
defaults are plain data (None, bool, int, float, str, bytes, numpy scalars, and tuples,
lists and dicts of those), is described by its module, qualified name and first line,
with its values as JSON. Another process imports the module, finds the code object by
qualified name *and* first line (several inner functions may share a qualified name:
``make.<locals>.src`` defined in three branches) among the code constants of the
enclosing function, and rebuilds the function from the module's globals and cells made
from the values. Nothing is pickled: only code the module already holds runs.

``describe`` raises ``NotPortable`` saying why a callable cannot be described (a closure
over an object, a bound method, a callable object, code not found in its module).

**The main script's functions** (``__main__``: the trainer's script) cannot be imported by
a worker process started fresh (``py_start_method="spawn"``), whose ``__main__`` is the
worker's own module. ``by_value`` adds what rebuilds them there without running the script
again: their compiled code (``marshal``, read back by the same interpreter) and the
script's globals that code loads, transitively: modules by name, names imported from other
modules by reference, plain data as JSON, and the script's other functions by value; each
rebuilt function shares one globals dict, as the script's do. It goes only to this
process's own workers, never into a spec, a checkpoint or onto the wire: a spec names the
function as before, and a server runs only the sources it registered.
"""

from __future__ import annotations

import base64
import builtins
import dis
import importlib
import inspect
import json
import marshal
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

PLAIN_DATA = ("plain data (None, bool, int, float, str, bytes, numpy scalars, and tuples, "
              "lists and dicts of those)")


class NotPortable(Exception):
    """Why a callable cannot be rebuilt in another process from its description."""


class _NotPlain(Exception):
    pass


def encode(value: Any) -> Any:
    """``value`` as JSON that ``decode`` turns back into an equal value of the same types;
    ``_NotPlain`` where it is not plain data. A JSON object is always a tag."""
    if value is None or isinstance(value, bool | str):
        return value
    if type(value) is int or type(value) is float:
        return value
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, tuple | list):
        items = [encode(v) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else {"list": items}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"numpy": value.dtype.str, "value": value.item()}
    raise _NotPlain(type(value).__qualname__)


def decode(held: Any) -> Any:
    if not isinstance(held, dict):
        return held
    if "bytes" in held:
        return bytes.fromhex(held["bytes"])
    if "tuple" in held:
        return tuple(decode(v) for v in held["tuple"])
    if "list" in held:
        return [decode(v) for v in held["list"]]
    if "dict" in held:
        return {decode(k): decode(v) for k, v in held["dict"]}
    return np.dtype(held["numpy"]).type(held["value"])


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _code_of(value: Any) -> types.CodeType | None:
    value = getattr(value, "__func__", value)  # a classmethod, staticmethod
    try:
        value = inspect.unwrap(value)
    except ValueError:
        return None
    code = getattr(value, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def find_code(module: types.ModuleType, qualname: str, line: int) -> types.CodeType | None:
    """The code object of ``module`` named ``qualname`` that starts at ``line``: searched
    in the enclosing function the qualified name gives (``outer.<locals>.inner``), else
    among the module's functions (a module-level lambda)."""
    outer, sep, _ = qualname.partition(".<locals>.")
    roots: list[Any] = []
    if sep:
        target: Any = module
        try:
            for part in outer.split("."):
                target = getattr(target, part)
        except AttributeError:
            return None
        roots.append(target)
    else:
        roots.extend(vars(module).values())
    for root in roots:
        code = _code_of(root)
        if code is None:
            continue
        for found in _codes(code):
            if found.co_qualname == qualname and found.co_firstlineno == line:
                return found
    return None


def describe(source: Callable[..., Any]) -> dict[str, Any]:
    """The JSON description of ``source`` another process rebuilds it from (``rebuild``),
    or ``NotPortable`` saying why there is none."""
    if not isinstance(source, types.FunctionType):
        kind = ("a bound method" if isinstance(source, types.MethodType)
                else f"a {type(source).__qualname__} object, not a function")
        raise NotPortable(f"is {kind}, which worker processes cannot rebuild without "
                          "pickling it")
    module_name, qualname, code = source.__module__, source.__qualname__, source.__code__
    module = sys.modules.get(module_name)
    if module is None or source.__globals__ is not vars(module):
        raise NotPortable(f"is not defined in an importable module ({module_name!r})")
    if find_code(module, qualname, code.co_firstlineno) is not code:
        raise NotPortable(f"its code is not found in module {module_name!r} by its name "
                          f"{qualname!r} and line {code.co_firstlineno} (made by exec, or "
                          "by a decorator)")
    cells: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, source.__closure__ or (), strict=True):
        try:
            value = cell.cell_contents
        except ValueError:
            raise NotPortable(f"closes over {name!r} before it is assigned") from None
        try:
            cells[name] = encode(value)
        except _NotPlain as exc:
            raise NotPortable(f"closes over {name!r}, a {exc}, which is not "
                              f"{PLAIN_DATA}") from None
    try:
        defaults = encode(source.__defaults__)
        kwdefaults = encode(source.__kwdefaults__)
    except _NotPlain as exc:
        raise NotPortable(f"has a default argument of type {exc}, which is not "
                          f"{PLAIN_DATA}") from None
    return {"module": module_name, "qualname": qualname, "line": code.co_firstlineno,
            "cells": cells, "defaults": defaults, "kwdefaults": kwdefaults}


def _const(value: Any) -> str:
    """A code constant as text that does not depend on string hashing (a frozenset's order
    does)."""
    if isinstance(value, frozenset):
        return f"frozenset({sorted(_const(v) for v in value)})"
    if isinstance(value, tuple):
        return f"({', '.join(_const(v) for v in value)})"
    return repr(value)


def digest_input(source: Callable[..., Any], held: dict[str, Any]) -> bytes:
    """What names a described function's definition: its description, and its code's
    bytes, constants and names (the same in every process of the same Python)."""
    code = getattr(source, "__code__", None)
    body: list[Any] = []
    if isinstance(code, types.CodeType):
        body = [code.co_code.hex(), code.co_names,
                [_const(c) for c in code.co_consts if not isinstance(c, types.CodeType)]]
    return json.dumps([held, body], sort_keys=True).encode()


#: Global names the code of a function loads or stores.
_GLOBAL_OPS = {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME"}


def _globals_loaded(code: types.CodeType) -> set[str]:
    return {ins.argval for c in _codes(code) for ins in dis.get_instructions(c)
            if ins.opname in _GLOBAL_OPS and isinstance(ins.argval, str)}


def by_value(source: Callable[..., Any], held: dict[str, Any]) -> dict[str, Any]:
    """``held`` (``describe(source)``) with the code and globals that rebuild ``source``, a
    function of the main script, in a worker that cannot import that script (see the
    module); ``NotPortable`` naming the global that cannot go."""
    assert isinstance(source, types.FunctionType)
    script = source.__globals__
    entries: dict[str, Any] = {}
    todo = sorted(_globals_loaded(source.__code__))
    while todo:
        name = todo.pop()
        if name in entries or name not in script:
            continue  # a builtin, or a name the script has not defined (yet)
        value = script[name]
        if isinstance(value, types.ModuleType):
            entries[name] = {"module": value.__name__}
        elif isinstance(value, types.FunctionType) and value.__globals__ is script:
            entries[name] = {"function": _function_by_value(value, name)}
            todo.extend(sorted(_globals_loaded(value.__code__)))
        elif _imported(value):
            entries[name] = {"import": f"{value.__module__}:{value.__qualname__}"}
        else:
            try:
                entries[name] = {"value": encode(value)}
            except _NotPlain as exc:
                raise NotPortable(
                    f"uses the main script's global {name!r}, a {exc}, which a worker "
                    f"started with 'spawn' cannot rebuild (it is not a module, a function, "
                    f"a name imported from a module or {PLAIN_DATA})") from None
    return {**held, "code": _code_text(source.__code__), "globals": entries}


def _function_by_value(function: types.FunctionType, name: str) -> dict[str, Any]:
    try:
        defaults = encode(function.__defaults__)
        kwdefaults = encode(function.__kwdefaults__)
    except _NotPlain as exc:
        raise NotPortable(f"uses the main script's function {name!r}, whose default argument "
                          f"is a {exc}, which is not {PLAIN_DATA}") from None
    if function.__closure__:
        raise NotPortable(f"uses the main script's function {name!r}, a closure")
    return {"code": _code_text(function.__code__), "qualname": function.__qualname__,
            "defaults": defaults, "kwdefaults": kwdefaults}


def is_named(value: Any, module: str, qualname: str) -> bool:
    """Whether ``module:qualname`` names ``value`` itself (a module's own function, class
    or object), in the modules loaded now."""
    target: Any = sys.modules.get(module)
    try:
        for part in qualname.split("."):
            target = getattr(target, part)
    except AttributeError:
        return False
    return target is value


def _imported(value: Any) -> bool:
    """Whether ``value`` is named by its module and qualified name in a module other than
    the main script (a function, class or object imported into it)."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return isinstance(module, str) and isinstance(qualname, str) and module != "__main__" \
        and is_named(value, module, qualname)


def _code_text(code: types.CodeType) -> str:
    return base64.b64encode(marshal.dumps(code)).decode()


def _code_from(text: str) -> types.CodeType:
    code = marshal.loads(base64.b64decode(text))
    if not isinstance(code, types.CodeType):
        raise LookupError("the description's code is not a code object")
    return code


def _script_globals(entries: dict[str, Any]) -> dict[str, Any]:
    """The globals of the main script's functions rebuilt by value: one dict they share."""
    script: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for name, entry in entries.items():
        if "module" in entry:
            script[name] = importlib.import_module(entry["module"])
        elif "import" in entry:
            module, _, qualname = entry["import"].partition(":")
            target: Any = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
            script[name] = target
        elif "value" in entry:
            script[name] = decode(entry["value"])
    for name, entry in entries.items():
        if "function" in entry:
            held = entry["function"]
            function = types.FunctionType(_code_from(held["code"]), script, name,
                                          decode(held["defaults"]))
            function.__kwdefaults__ = decode(held["kwdefaults"])
            function.__qualname__ = held["qualname"]
            script[name] = function
    return script


def rebuild(held: dict[str, Any]) -> Callable[..., Any]:
    """The function ``held`` describes, from its module's code and globals (or, for the
    main script's, from the code and globals it carries); ImportError or LookupError
    saying why not."""
    if "code" in held:
        code = _code_from(held["code"])
        scope = _script_globals(held["globals"])
    else:
        module = importlib.import_module(held["module"])
        found = find_code(module, held["qualname"], held["line"])
        if found is None:
            raise LookupError(f"no function {held['qualname']!r} at line {held['line']} in "
                              f"module {held['module']!r}")
        code, scope = found, vars(module)
    return _function(code, scope, held)


def _function(code: types.CodeType, scope: dict[str, Any],
              held: dict[str, Any]) -> Callable[..., Any]:
    missing = set(code.co_freevars) ^ set(held["cells"])
    if missing:
        raise LookupError(f"{held['qualname']!r} closes over {sorted(code.co_freevars)}, the "
                          f"description holds {sorted(held['cells'])}")
    cells = tuple(types.CellType(decode(held["cells"][name])) for name in code.co_freevars)
    function = types.FunctionType(code, scope, code.co_name, decode(held["defaults"]),
                                  cells or None)
    function.__kwdefaults__ = decode(held["kwdefaults"])
    function.__qualname__ = held["qualname"]
    return function
