"""``pytest --pyargs pytest_talos_conformance``: the suite's options before pytest parses them.

pytest reads the options of the conftests it finds under the paths given on the command
line before it parses that command line; a ``--pyargs`` module name is not a path, so the
suite's conftest (which loads :mod:`pytest_talos.plugin.conformance`, and with it the
``--talos-suite``/``--talos-report``/... options) is only found at collection, too late:
pytest rejects every suite option. When an argument names the installed suite package, the
pytest-talos plugin loads the conformance plugin itself, early. A run that names no suite
package (the project's own tests, anyone's tests using the ``talos_node`` fixtures) never
gets the suite's options, hooks or verdict.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_talos.plugin.cli import SUITE_PACKAGES

__all__ = ["CONFORMANCE_PLUGIN", "load_suite_plugin_for_pyargs", "names_the_suite"]

CONFORMANCE_PLUGIN = "pytest_talos.plugin.conformance"


def names_the_suite(args: Iterable[str]) -> bool:
    """Whether one of ``args`` is a module name of the suite (``pytest_talos_conformance``,
    ``pytest_talos_conformance.vendor``, ``pytest_talos_conformance.api.test_api::test_x``)."""
    for arg in args:
        if arg.startswith("-"):
            continue
        module = arg.split("::", 1)[0]
        if module.split(".", 1)[0] in SUITE_PACKAGES and "/" not in module:
            return True
    return False


def load_suite_plugin_for_pyargs(early_config: pytest.Config, args: list[str]) -> None:
    """Load the conformance plugin now when ``--pyargs`` names the suite (see the module)."""
    namespace = early_config.known_args_namespace
    if not getattr(namespace, "pyargs", False):
        return
    if names_the_suite([str(arg) for arg in getattr(namespace, "file_or_dir", None) or args]):
        early_config.pluginmanager.import_plugin(CONFORMANCE_PLUGIN)
