"""Reading the server's configuration: the YAML file, then the environment, then the
command line's flags, turned into the typed ``ServerConfig`` of ``config.py`` (``load``).

Every refusal is a ``ConfigError`` that names the key's dotted path, the value and where it
came from (the file, an environment variable, or the command line).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from conveyor_server.app.config import (
    ENV_ALIASES,
    ConfigError,
    PipelineEntry,
    ServerConfig,
    env_name,
    leaf_paths,
    union_args,
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class _Text(str):
    """A value that arrived as text (from the environment) and may be parsed."""


def read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {str(path)!r}: "
                          f"{exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{at}: "
                          f"{getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got "
                          f"{type(data).__name__}")
    return data


def set_path(raw: dict[str, Any], path: str, value: Any, *, text: bool) -> None:
    *parents, leaf = path.split(".")
    node = raw
    for i, part in enumerate(parents):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(parents[:i + 1])}: expected a mapping, got "
                              f"{child!r}")
        node = child
    node[leaf] = _Text(value) if text else value


def build(cls: type, raw: Any, prefix: str, where: str, origins: Mapping[str, str]) -> Any:
    """An instance of the dataclass ``cls`` from the mapping ``raw``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'the file'}: expected a mapping, got "
                          f"{raw!r} (in {where})")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, raw)) - set(fields))
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown key in {where} (known keys"
                          f"{' under ' + prefix.rstrip('.') if prefix else ''}: "
                          f"{', '.join(sorted(fields))})")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{prefix}{name}: required (in {where})")
            continue
        path = prefix + name
        source = origins.get(path, where)
        value = raw[name]
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            values[name] = build(hint, value if value is not None else {},  # type: ignore[arg-type]
                                 path + ".", where, origins)
        elif name == "pipelines":
            values[name] = _pipelines(value, path, where)
        else:
            values[name] = coerce(value, hint, path, source, f.metadata)
    return cls(**values)


def _pipelines(value: Any, path: str, where: str) -> tuple[PipelineEntry, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"{path}: expected a list of pipelines, got {value!r} (in {where})")
    entries = []
    names: set[str] = set()
    for i, item in enumerate(value):
        entry = build(PipelineEntry, item, f"{path}[{i}].", where, {})
        if (entry.spec_file is None) == (entry.spec is None):
            raise ConfigError(f"{path}[{i}]: give exactly one of spec_file and spec "
                              f"(in {where})")
        if entry.name in names:
            raise ConfigError(f"{path}[{i}].name: {entry.name!r} appears twice (in {where})")
        names.add(entry.name)
        entries.append(entry)
    return tuple(entries)


def coerce(value: Any, hint: Any, path: str, source: str,
           metadata: Mapping[str, Any] | None = None) -> Any:
    """``value`` as the type ``hint`` (str, int, float, bool, Literal, tuple[str, ...],
    Mapping, each possibly ``| None``)."""
    options = union_args(hint)
    optional = type(None) in options
    (target,) = [o for o in options if o is not type(None)]
    text = isinstance(value, _Text)
    if value is None or (text and value.strip().lower() in ("", "null", "none") and optional):
        if optional:
            return None
        raise ConfigError(f"{path}: must be set, got null (from {source})")
    got = f"got {str(value)!r}" if text else f"got {value!r}"
    origin = typing.get_origin(target)
    if origin is Literal:
        allowed = typing.get_args(target)
        candidate = str(value).strip().lower() if text else value
        if candidate not in allowed:
            raise ConfigError(f"{path}: expected one of {', '.join(map(str, allowed))}, "
                              f"{got} (from {source})")
        return candidate
    if origin is tuple:
        if text:
            return tuple(p.strip() for p in value.split(",") if p.strip())
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: expected a list of strings, {got} (from {source})")
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: expected a list of strings, {got} (from {source})")
        return tuple(value)
    if target is bool:
        return _bool(value, path, source, got)
    if target in (int, float):
        number = _number(value, target, path, source, got)
        if not math.isfinite(number):
            raise ConfigError(f"{path}: expected a finite number, {got} (from {source})")
        low = (metadata or {}).get("min")
        if low is not None and number < low:
            raise ConfigError(f"{path}: must be at least {low}, {got} (from {source})")
        high = (metadata or {}).get("max")
        if high is not None and number > high:
            raise ConfigError(f"{path}: must be at most {high}, {got} (from {source})")
        return number
    if target is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, {got} (from {source})")
        return str(value)
    if origin is Mapping or target is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, {got} (from {source})")
        return dict(value)
    raise ConfigError(f"{path}: unsupported type {target!r}")  # a bug in the schema


def _bool(value: Any, path: str, source: str, got: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, _Text) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"{path}: expected true or false, {got} (from {source})")


def _number(value: Any, target: type, path: str, source: str, got: str) -> Any:
    kind = "an integer" if target is int else "a number"
    if isinstance(value, bool):
        raise ConfigError(f"{path}: expected {kind}, {got} (from {source})")
    if isinstance(value, _Text):
        try:
            return target(value.strip())
        except ValueError:
            raise ConfigError(f"{path}: expected {kind}, {got} (from {source})") from None
    if target is int and isinstance(value, int):
        return value
    if target is float and isinstance(value, int | float):
        return float(value)
    raise ConfigError(f"{path}: expected {kind}, {got} (from {source})")


def load(path: str | Path | None = None, env: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None) -> ServerConfig:
    """Read the file (if any), apply the environment and then ``overrides`` (dotted path ->
    value, from flags), and validate the result."""
    raw: dict[str, Any] = read_yaml(path) if path is not None else {}
    origins: dict[str, str] = {}
    where = str(path) if path is not None else "the defaults"
    leaves = leaf_paths()
    by_env = {env_name(p): p for p in leaves} | ENV_ALIASES
    # Older aliases first, so that the canonical name wins where both are set.
    for name, value in sorted((env or {}).items(), key=lambda kv: kv[0] not in ENV_ALIASES):
        key = by_env.get(name)
        if key is not None:
            set_path(raw, key, value, text=True)
            origins[key] = f"environment variable {name}"
    for key, value in (overrides or {}).items():
        if key not in leaves:
            raise ConfigError(f"{key}: no such configuration key")
        set_path(raw, key, value, text=False)
        origins[key] = "the command line"
    base = Path(path).parent if path is not None else Path.cwd()
    config = build(ServerConfig, raw, "", where, origins)
    auth = raw.get("auth")
    for secret in ("token", "token_file", "tokens_file"):
        given = auth.get(secret) if isinstance(auth, dict) else None
        # Null in the file is the default; an empty string, or an empty or null value from
        # the environment or a flag, is a secret that went missing.
        explicit = f"auth.{secret}" in origins or isinstance(given, str)
        if isinstance(auth, dict) and secret in auth and explicit \
                and not str(given or "").strip():
            raise ConfigError(f"auth.{secret}: set, but empty (from "
                              f"{origins.get('auth.' + secret, where)}): unset it, or set "
                              "auth.disabled: true to run without authentication; an empty "
                              "secret does not turn it off")
    return dataclasses.replace(config,
                               pipelines=tuple(_resolve_spec_paths(config.pipelines, base)))


def _resolve_spec_paths(entries: tuple[PipelineEntry, ...],
                        base: Path) -> list[PipelineEntry]:
    out = []
    for e in entries:
        if e.spec_file is not None and not Path(e.spec_file).is_absolute():
            e = dataclasses.replace(e, spec_file=str(base / e.spec_file))
        out.append(e)
    return out
