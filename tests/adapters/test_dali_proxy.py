"""``conveyor.dali.plugin.pytorch`` is a package, as DALI's: its ``experimental.proxy``
imports as DALI's ResNet-50 example imports it, and using it says what Conveyor offers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conveyor.errors import NotSupported


def test_the_resnet50_examples_import_line_works_and_loads_no_torch() -> None:
    code = ("import sys\n"
            "from conveyor.dali.plugin.pytorch.experimental import proxy as dali_proxy\n"
            "from conveyor.dali.plugin.pytorch import DALIClassificationIterator, "
            "LastBatchPolicy\n"
            "assert LastBatchPolicy.PARTIAL and DALIClassificationIterator\n"
            "assert 'torch' not in sys.modules, 'importing the proxy loaded torch'\n"
            "assert 'grpc' not in sys.modules, 'importing the proxy loaded gRPC'\n"
            "print(sorted(dali_proxy.__all__))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['DALIServer', 'DataLoader']"


@pytest.mark.parametrize("name", ["DALIServer", "DataLoader"])
def test_using_the_proxy_is_not_supported_and_names_what_to_use(name: str) -> None:
    from conveyor.dali.plugin.pytorch.experimental import proxy as dali_proxy

    with pytest.raises(NotSupported) as raised:
        getattr(dali_proxy, name)(object(), batch_size=4)
    message = str(raised.value)
    assert f"proxy.{name}" in message
    assert "DALI's proxy is not supported by Conveyor" in message
    assert "DALIClassificationIterator" in message and "conveyor.torch" in message
    assert "docs/porting-from-dali.md" in message


def test_another_name_of_the_proxy_module_is_not_supported_and_absent_to_hasattr() -> None:
    from conveyor.dali.plugin.pytorch.experimental import proxy as dali_proxy

    with pytest.raises(NotSupported, match="DALI's proxy is not supported"):
        dali_proxy.DALIOutputBatchRef  # noqa: B018
    assert not hasattr(dali_proxy, "DALIOutputSampleRef")
