"""Which callables a pipeline's ``external_source`` (and ``python_function``) may name, and
finding them.

A server calls only the callables its configuration lists (``external_sources``:
``"module:function"`` names, imported once at start); a spec naming another is refused
with INVALID_ARGUMENT naming the field and the source, and so is a checkpoint naming one
(a restore onto a server that does not register it). In a trainer's process every
callable may be named: the one ``fn.external_source`` was given under that name, else the
``"module:function"`` imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.definition import external_source as names
from conveyor.definition.external_source import Source
from conveyor.errors import SpecError


class ExternalSources:
    def __init__(self, registered: Mapping[str, Source] | None) -> None:
        """``registered``: the callables allowed, by name; None: any (in process)."""
        self._registered = dict(registered) if registered is not None else None

    @classmethod
    def configured(cls, sources: Sequence[str], key: str = "external_sources") -> ExternalSources:
        """A server's sources: each ``"module:function"`` imported now, or InvalidArgument
        naming the entry (``external_sources[1]: cannot import ...``)."""
        return cls({name: names.import_source(name, f"{key}[{i}]")
                    for i, name in enumerate(sources)})

    def start_method(self, asked: str) -> str:
        """How parallel sources' worker processes start: in process as asked (DALI's
        ``py_start_method``); on a server always ``"spawn"``, since a process serving gRPC
        must not fork once its threads run."""
        return asked if self._registered is None else "spawn"

    def described(self, name: str) -> dict[str, Any] | None:
        """In process, the description worker processes rebuild the closure named ``name``
        from (``conveyor.definition.source_closures``); None for a function imported by name, and
        always on a server, which runs only its registered sources."""
        return names.described(name) if self._registered is None else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._registered or ()))

    def resolve(self, name: str, op_index: int, op: str = "external_source",
                field: str = "source") -> Source:
        """The callable named ``name`` in ``ops[op_index]``'s argument ``field``."""
        where = f"ops[{op_index}].args.{field}"
        if self._registered is None:
            return names.remembered(name) or names.import_source(name, where)
        source = self._registered.get(name)
        if source is None:
            raise SpecError(op, field,
                            f"{name!r} ({where}) is not registered on this server: a server "
                            "calls only the callables its configuration lists in "
                            "external_sources")
        return source


#: In a trainer's process: every callable may be named.
IN_PROCESS = ExternalSources(None)
#: A server without ``external_sources``: none may.
NONE_REGISTERED = ExternalSources({})
