"""Run every benchmark: ``make bench`` (or ``make bench BENCH_ARGS=--quick``)."""

from __future__ import annotations

import subprocess
import sys

MODULES = ("bench.throughput", "bench.batch_ops", "bench.transport", "bench.checkpointing",
           "bench.memory", "bench.behaviour_probe", "bench.wire", "bench.area_resize",
           "bench.gpu_planning", "bench.file_reads", "bench.resnet50", "bench.object_storage",
           "bench.tf_adapter", "bench.fleet")


def main() -> int:
    failed = []
    for module in MODULES:
        print(f"\n===== {module} =====\n", flush=True)
        if subprocess.run([sys.executable, "-m", module, *sys.argv[1:]], check=False).returncode:
            failed.append(module)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
