"""What the service reports as it works, for metrics: ``ServiceObserver``.

The service calls these methods; the application passes an implementation in
(``conveyor_server.app.metrics.Metrics`` records them as Prometheus metrics). The
streaming hot path makes three calls per batch and none per sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class ServiceObserver(Protocol):
    def watch_hosted(self, count: Callable[[], int]) -> None:
        """``count()`` tells how many pipelines this server hosts now."""

    def rpc_finished(self, method: str, code: str) -> None:
        """An RPC of the Conveyor service ended with status ``code`` (``OK``, ...)."""

    def stream_opened(self) -> None: ...

    def stream_closed(self) -> None: ...

    def batch_waited(self, seconds: float) -> None:
        """A stream waited ``seconds`` for the engine's next batch."""

    def batch_streamed(self, samples: int, nbytes: int) -> None:
        """A batch of ``samples`` samples went out in frames of ``nbytes`` bytes."""

    def pipeline_streamed(self, pipeline: str, samples: int, waited: float) -> None:
        """A batch of ``samples`` samples of ``pipeline`` went out, after its stream waited
        ``waited`` seconds for the engine with no batch ready to send."""

    def decode_error(self) -> None:
        """A batch could not be made: a data file was unreadable or undecodable."""

    def samples_failed(self, policy: str, count: int) -> None:
        """``count`` samples of a batch failed and were handled by ``policy`` ("skip" or
        "replace") instead of ending the stream."""

    def checkpoint_written(self, seconds: float) -> None:
        """A checkpoint was computed, sealed and stored in ``seconds``."""

    def restored(self, seconds: float) -> None:
        """A Restore succeeded in ``seconds``."""
