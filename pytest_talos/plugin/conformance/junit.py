"""What was tested, in the JUnit XML (``--junitxml``) as testsuite properties; each check's
test case named by its check id (classname) and node (name), not by its file's path (which,
from the wheel, is a site-packages path)."""

from __future__ import annotations

import pytest

from pytest_talos.plugin.conformance.collector import PROP_CHECK, PROP_NODE
from pytest_talos.plugin.conformance.run import run_info
from pytest_talos.plugin.conformance.state import COLLECTOR, is_worker
from pytest_talos.reporting import build_results, tested_facts

__all__ = ["JunitTested"]


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label.lower()).strip("_")


class JunitTested:
    """Puts what was tested into the JUnit XML as testsuite properties (talos_target, ...),
    before pytest writes the file."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """classname = the check id, name = the node (or "cluster"), before pytest's
        junitxml plugin records the report (the attributes set here take precedence)."""
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        props = dict(report.user_properties)
        if xml is None or PROP_CHECK not in props:
            return
        reporter = xml.node_reporter(report)
        reporter.add_attribute("classname", str(props[PROP_CHECK]))
        reporter.add_attribute("name", str(props.get(PROP_NODE) or "cluster"))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from _pytest.junitxml import xml_key  # the one way to add properties from here

        config = self.config
        xml = config.stash.get(xml_key, None)
        collector = config.stash.get(COLLECTOR, None)
        if xml is None or collector is None or is_worker(config):
            return
        run = build_results([], run_info(config, collector))["run"]
        for label, value in tested_facts(run):
            xml.add_global_property(f"talos_{_slug(label)}", value)
