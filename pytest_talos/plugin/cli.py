"""``talos-conformance``: run the installed conformance suite with pytest, from any directory.

Every argument goes to pytest unchanged (``talos-conformance --talos-emulator -q -n auto``);
the suite's path comes first. The wheel installs the suite as the package
``pytest_talos_conformance`` (its source is ``conformance/`` at the top of the repository, which
a checkout or an editable install runs directly), so ``pytest --pyargs
pytest_talos_conformance`` runs it too.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

__all__ = ["SUITE_PACKAGES", "conformance_main", "suite_path"]

# The installed name first; "conformance" is the checkout's (an editable install).
SUITE_PACKAGES = ("pytest_talos_conformance", "conformance")


def suite_path() -> Path | None:
    """The directory of the conformance suite this installation has, if any."""
    for name in SUITE_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            folder = Path(location)
            if (folder / "conftest.py").is_file() and (folder / "_support").is_dir():
                return folder
    return None


def conformance_main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    suite = suite_path()
    if suite is None:
        print(
            "talos-conformance: error: the conformance suite is not installed with this "
            "pytest-talos (reinstall the wheel: pip install pytest-talos)",
            file=sys.stderr,
        )
        return int(pytest.ExitCode.USAGE_ERROR)
    # pytest's cache goes to the current directory, not into site-packages.
    cache = ["-o", f"cache_dir={Path(os.getcwd()) / '.pytest_cache'}"]
    # This script imported pytest_talos before pytest could mark it for assertion rewriting
    # (the library does not need it): not worth a warning in every run.
    quiet = [
        "-W",
        "ignore:Module already imported so cannot be rewritten; pytest_talos"
        ":pytest.PytestAssertRewriteWarning",
    ]
    return int(pytest.main([str(suite), *cache, *quiet, *args]))


if __name__ == "__main__":
    sys.exit(conformance_main())
