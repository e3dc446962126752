"""The package's public names resolve, and importing it stays cheap."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pytest_talos


@pytest.mark.parametrize("name", [n for n in pytest_talos.__all__ if n != "__version__"])
def test_every_exported_name_resolves(name: str) -> None:
    value = getattr(pytest_talos, name)
    assert getattr(value, "__name__", name) == name


def test_all_is_sorted_and_dir_matches() -> None:
    assert pytest_talos.__all__ == sorted(pytest_talos.__all__)
    assert dir(pytest_talos) == pytest_talos.__all__


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pytest_talos.nope


def test_importing_the_package_loads_neither_grpc_nor_the_emulator() -> None:
    code = (
        "import sys, pytest_talos; "
        "print(sorted(m for m in sys.modules if m.startswith(('grpclib', 'pytest_talos.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_all_lists_exactly_the_lazy_exports() -> None:
    assert set(pytest_talos.__all__) == {*pytest_talos._EXPORTS, "__version__"}
