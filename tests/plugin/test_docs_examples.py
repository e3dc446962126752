"""The examples in docs/plugin.md run, against the emulated cluster, as written."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.plugin.conftest import REPO

Run = Callable[..., pytest.RunResult]
DOC = REPO / "docs" / "plugin.md"
_EXAMPLE = re.compile(r"<!-- example: (?P<name>[^>]+?) -->\n```python\n(?P<code>.*?)```", re.S)


def examples() -> dict[str, str]:
    return {m["name"]: m["code"] for m in _EXAMPLE.finditer(DOC.read_text())}


def test_the_doc_has_its_examples() -> None:
    assert sorted(examples()) == [
        "conftest.py (expected ports)",
        "conftest.py (node report)",
        "conftest.py (select nodes)",
        "script",
        "test_checks_example.py",
        "test_cluster_example.py",
        "test_guard_example.py",
        "test_node_example.py",
    ]


def test_example_test_files_pass(run: Run, pytester: pytest.Pytester) -> None:
    found = examples()
    tests = {
        name.removesuffix(".py"): code for name, code in found.items() if name.startswith("test_")
    }
    pytester.makepyfile(**tests)
    result = run("--talos-emulator", "--talos-allow", "mutating", "--no-header")
    result.assert_outcomes(passed=13)


def test_script_example_compiles() -> None:
    compile(examples()["script"], "docs/plugin.md:script", "exec")


def test_expected_ports_example(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(examples()["conftest.py (expected ports)"])
    pytester.makepyfile("""
        def test_ports(talos_node):
            if talos_node.role == "worker":
                assert 4240 in talos_node.expected_ports
            else:
                assert 2380 not in talos_node.expected_ports
    """)
    run("--talos-emulator", "--no-header").assert_outcomes(passed=2)


def test_select_nodes_example(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(examples()["conftest.py (select nodes)"])
    pytester.makepyfile("def test_node(talos_node):\n    pass\n")
    run("--talos-emulator", "--no-header").assert_outcomes(passed=2)


def test_node_report_example(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(examples()["conftest.py (node report)"])
    pytester.makepyfile("""
        import pytest

        @pytest.mark.talos_role("worker")
        def test_fails(talos_node):
            assert False
    """)
    result = run("--talos-emulator", "--no-header")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- talos services -*", "kubelet: Running healthy=True"])
