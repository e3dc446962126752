"""The one list of environment variables the kit reads, and the docs that name them."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_talos.emulator.apid.calllog import SIZE_ENV
from pytest_talos.plugin.conformance.options import SUITE_OPTIONS
from pytest_talos.plugin.environment import TALOS_ENVIRONMENT
from pytest_talos.plugin.settings import OPTION_ENVIRONMENT

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# TALOSCONFIG or TALOS_X, not PYTEST_TALOS_X nor the placeholder $TALOS_<NAME>.
_VARIABLE = re.compile(r"(?<![A-Z0-9_])TALOS(?:CONFIG|_[A-Z0-9_]*[A-Z0-9])")


def test_the_list_has_each_variable_once_and_every_option_s() -> None:
    assert len(set(TALOS_ENVIRONMENT)) == len(TALOS_ENVIRONMENT)
    assert set(OPTION_ENVIRONMENT) <= set(TALOS_ENVIRONMENT)
    for option in SUITE_OPTIONS.values():
        assert (option.env in TALOS_ENVIRONMENT) == (option.ini is not None), option.name
    assert {"TALOSCONFIG", "TALOS_HOME", "TALOS_LEAVE_OUT", "TALOS_SHARD"} <= set(TALOS_ENVIRONMENT)


def test_the_docs_name_only_variables_the_kit_reads() -> None:
    known = {*TALOS_ENVIRONMENT, SIZE_ENV}  # the emulator's own call-log knob besides
    for doc in DOCS:
        named = set(_VARIABLE.findall(doc.read_text()))
        assert named <= known, f"{doc.relative_to(REPO)} names {sorted(named - known)}"


def test_the_plugin_docs_table_has_a_row_for_every_option_variable() -> None:
    text = (REPO / "docs" / "plugin.md").read_text()
    missing = [env for env in OPTION_ENVIRONMENT if f"| `{env}` |" not in text]
    assert not missing, f"docs/plugin.md's option table has no row for {missing}"


def test_the_conformance_docs_table_has_a_row_for_every_suite_option() -> None:
    text = (REPO / "docs" / "conformance.md").read_text()
    missing = [o.flag for o in SUITE_OPTIONS.values() if f"| `{o.flag}" not in text]
    assert not missing, f"docs/conformance.md's option table has no row for {missing}"
