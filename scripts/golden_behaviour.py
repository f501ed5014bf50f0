"""Measure the behaviour digests in the reference environment and print them as JSON.

    .venv/bin/python scripts/golden_behaviour.py > tests/engine/golden/behaviour.json

Run it only when an operator's output changed on purpose: the new digests make servers
of this version refuse checkpoints that use that operator (see engine/identity/engine_id.py).
"""

from __future__ import annotations

import json

from conveyor_server.engine.identity.behaviour.reference import measure_in, reference_environment

if __name__ == "__main__":
    print(json.dumps(measure_in(reference_environment()), indent=2))
