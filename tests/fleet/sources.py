"""External sources for the fan-in tests that servers register by name
(``tests.fleet.sources:salted``).

``salted`` stands for a source whose output depends on its host (a local file that differs
between machines, say): every sample carries the value of ``FLEET_TEST_SALT`` in the
environment of the process computing it. Servers started with different salts publish the
same behaviour digest (an external source is the user's code, outside the engine's
identity) and compute different bytes for the same batch: the fan-in's cross-check of
hedged copies is what notices."""

from __future__ import annotations

import os

import numpy as np

from conveyor.definition.external_source import SampleInfo

SALT = "FLEET_TEST_SALT"
SALTED = "tests.fleet.sources:salted"


def salted(info: SampleInfo) -> np.ndarray:
    """(epoch, index in epoch, the host's salt)."""
    return np.array([info.epoch_idx, info.idx_in_epoch, int(os.environ.get(SALT, "0"))],
                    dtype=np.int64)
