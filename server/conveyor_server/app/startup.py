"""Pipelines named in the configuration: read their specs before the server starts, and
create (or take over) them through the server's own API once it listens, before health
says SERVING, each as its ``owner`` (a client per owner: ``security.StartupCalls``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from google.protobuf import json_format, text_format

from conveyor import errors
from conveyor.client import Client
from conveyor.definition import spec as specs
from conveyor.v1 import pipeline_pb2
from conveyor_server.app.config import ConfigError, PipelineEntry

log = logging.getLogger("conveyor.server")

_TEXT = (".textproto", ".txtpb", ".pbtxt")
_BINARY = (".pb", ".binpb")


def load_spec(entry: PipelineEntry, index: int) -> pipeline_pb2.PipelineSpec:
    """The entry's spec, validated; refusals name ``pipelines[i]``."""
    where = f"pipelines[{index}]"
    spec = pipeline_pb2.PipelineSpec()
    try:
        if entry.spec is not None:
            json_format.ParseDict(dict(entry.spec), spec)
            where += ".spec"
        else:
            path = Path(entry.spec_file or "")
            where += f".spec_file ({path})"
            if path.suffix in _BINARY:
                spec.ParseFromString(path.read_bytes())
            elif path.suffix in _TEXT:
                text_format.Parse(path.read_text(), spec)
            else:
                json_format.Parse(path.read_text(), spec)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except Exception as exc:  # json/text ParseError, or DecodeError of a binary spec
        raise ConfigError(f"{where}: not a valid pipeline spec: {exc}") from None
    try:
        specs.validate_spec(spec)
    except errors.ConveyorError as exc:
        raise ConfigError(f"{where}: {exc.message}") from None
    return spec


def start_pipelines(clients: Mapping[str | None, Client], entries: tuple[PipelineEntry, ...],
                    loaded: list[pipeline_pb2.PipelineSpec]) -> None:
    """Create each configured pipeline with the client of its owner; a name already
    claimed is skipped, taken over from its latest checkpoint, or refused, as its
    ``if_exists`` says. If one fails, the names created here before it are released
    again, so a failed start leaves nothing claimed by a server that is gone."""
    created: list[PipelineEntry] = []
    try:
        _start(clients, entries, loaded, created)
    except BaseException:
        for entry in reversed(created):
            name = entry.name
            try:
                clients[entry.owner].delete(name)
            except errors.ConveyorError as exc:
                log.warning("could not release %s after a failed start: %s", name,
                            exc.message, extra={"pipeline": name})
        raise


def _start(clients: Mapping[str | None, Client], entries: tuple[PipelineEntry, ...],
           loaded: list[pipeline_pb2.PipelineSpec], created: list[PipelineEntry]) -> None:
    for entry, spec in zip(entries, loaded, strict=True):
        keep = entry.keep_checkpoints or 0
        client = clients[entry.owner]
        try:
            client.create(entry.name, spec, keep_checkpoints=keep)
            created.append(entry)
            log.info("created pipeline %s from the configuration", entry.name,
                     extra={"pipeline": entry.name})
            continue
        except errors.AlreadyExists as exc:
            if entry.if_exists == "fail":
                raise ConfigError(f"pipeline {entry.name!r} from the configuration: "
                                  f"{exc.message} (if_exists: fail)") from None
            if entry.if_exists == "skip":
                log.info("pipeline %s already exists; left as it is (if_exists: skip)",
                         entry.name, extra={"pipeline": entry.name})
                continue
        latest = client.pipeline(entry.name).latest_checkpoint
        if latest:
            client.restore(entry.name, latest, spec=spec, keep_checkpoints=keep)
            log.info("took over pipeline %s from its checkpoint %s (if_exists: restore)",
                     entry.name, latest, extra={"pipeline": entry.name,
                                                "checkpoint_id": latest})
        else:
            raise ConfigError(f"pipeline {entry.name!r} from the configuration already exists "
                              "and has no checkpoint to take it over from")
