"""Run pytest several times in a row and say which tests failed in how many runs.

``make test-repeat TESTS="tests/adapters/test_tf_adapter.py" RUNS=10`` calls this. Each run
is a fresh pytest process (a flake that depends on process state shows as it would in CI).
The summary lists every test that failed or errored in at least one run, with its count, and
the exit status is 1 when any run was red, so a loop in a shell or in CI can use it as it is.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def failed_tests(junit_xml: Path) -> list[str]:
    """The ids (``file::name``) of the tests a JUnit report marks failed or errored."""
    failed = []
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").replace(".", "/")
            failed.append(f"{module}.py::{case.get('name', '?')}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    parser.add_argument("pytest_args", nargs="*",
                        help="what pytest runs, e.g. tests/engine/test_ops.py")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    failures: Counter[str] = Counter()
    red_runs = 0
    with tempfile.TemporaryDirectory(prefix="conveyor-repeat-") as tmp:
        for run in range(1, args.runs + 1):
            report = Path(tmp) / f"run{run}.xml"
            started = time.monotonic()
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 f"--junitxml={report}", *args.pytest_args], check=False)
            failed = failed_tests(report) if report.exists() else ["(no report: pytest crashed)"]
            if result.returncode != 0 and not failed:
                failed = [f"(pytest exited {result.returncode})"]
            failures.update(failed)
            red_runs += bool(failed)
            print(f"run {run}/{args.runs}: {'red' if failed else 'green'} in "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    print(f"\n{args.runs - red_runs} of {args.runs} runs green")
    for test, count in failures.most_common():
        print(f"  failed in {count}/{args.runs} runs: {test}")
    return 1 if red_runs else 0


if __name__ == "__main__":
    sys.exit(main())
