"""The release table (pytest_talos.releases): which entry a node's tag is judged by, and each
difference between the releases making a different verdict when the wrong entry is applied."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from conformance._support import probes
from pytest_talos import models
from pytest_talos.node import default_expected_ports
from pytest_talos.releases import (
    ETCD_CLIENT_HTTP_PORT,
    RELEASES,
    V1_12,
    V1_13,
    V1_14,
    Release,
    release_named,
    release_of,
)

pytestmark = pytest.mark.usefixtures("suite_markers")


@pytest.mark.parametrize(
    ("tag", "line"),
    [("v1.12.11", "v1.12"), ("v1.13.0", "v1.13"), ("v1.14.0-rc.1", "v1.14"), ("1.14.2", "v1.14")],
)
def test_a_known_release_is_judged_by_its_own_entry(tag: str, line: str) -> None:
    match = release_of(tag)
    assert match.release.line == line
    assert match.exact
    assert match.note is None


@pytest.mark.parametrize(("tag", "line"), [("v1.15.0", "v1.14"), ("v1.11.6", "v1.12")])
def test_an_unknown_release_is_judged_by_the_nearest_and_says_so(tag: str, line: str) -> None:
    match = release_of(tag)
    assert match.release.line == line
    assert not match.exact
    assert match.note is not None
    assert tag in match.note
    assert f"judged by {line}" in match.note
    assert "\n" not in match.note


def test_a_tag_that_is_no_version_is_judged_by_the_newest_and_says_so() -> None:
    match = release_of("unknown")
    assert match.release is V1_14
    assert match.note is not None


@pytest.mark.parametrize(
    ("text", "line", "tag"),
    [
        ("v1.14.x", "v1.14", V1_14.tag),
        ("v1.12", "v1.12", V1_12.tag),
        ("1.13.*", "v1.13", V1_13.tag),
        ("v1.12.3", "v1.12", "v1.12.3"),
    ],
)
def test_emulator_release_names(text: str, line: str, tag: str) -> None:
    release, shown = release_named(text)
    assert (release.line, shown) == (line, tag)


@pytest.mark.parametrize("text", ["v1.15.x", "v1.11", "latest", ""])
def test_an_unknown_emulator_release_names_the_known_ones(text: str) -> None:
    with pytest.raises(ValueError, match=r"v1\.12\.x, v1\.13\.x, v1\.14\.x"):
        release_named(text)


def test_every_entry_names_the_tag_it_was_read_at() -> None:
    for line, release in RELEASES.items():
        assert release.tag.startswith(line + ".")
        assert len(release.commit) == 9


# --------------------------------------------------------------------------- etcd 2383


def test_v1_14_control_plane_opens_etcd_client_http_port() -> None:
    assert ETCD_CLIENT_HTTP_PORT in default_expected_ports("controlplane", None, V1_14)
    assert ETCD_CLIENT_HTTP_PORT not in default_expected_ports("worker", None, V1_14)


@pytest.mark.parametrize("wrong", [V1_12, V1_13])
def test_v1_14_node_judged_by_an_older_release_flags_2383(wrong: Release) -> None:
    assert ETCD_CLIENT_HTTP_PORT not in default_expected_ports("controlplane", None, wrong)


# --------------------------------------------------------------------------- sandboxd


def _service(name: str) -> models.ServiceInfo:
    return models.ServiceInfo(
        id=name, state="Running", healthy=True, health_unknown=False, last_message=""
    )


def test_v1_14_isolated_node_without_sandboxd_fails_only_by_its_own_release() -> None:
    from conformance.services import test_services as services

    wanted_v1_14 = services.expected_services("controlplane", "metal", V1_14, isolated=True)
    wanted_v1_13 = services.expected_services("controlplane", "metal", V1_13, isolated=True)
    assert "sandboxd" in wanted_v1_14
    assert "sandboxd" not in wanted_v1_13
    running = [_service(name) for name in sorted(wanted_v1_13)]  # sandboxd missing
    assert services._problems(running, wanted_v1_14) == {"sandboxd": "sandboxd: missing"}
    assert services._problems(running, wanted_v1_13) == {}  # v1.13's entry misses the defect


def test_sandboxd_is_not_wanted_in_container_mode_or_without_isolation() -> None:
    from conformance.services import test_services as services

    assert "sandboxd" not in services.expected_services("worker", "container", V1_14, True)
    assert "sandboxd" not in services.expected_services("worker", "metal", V1_14, False)


# --------------------------------------------------------------------------- sensitive types


def test_sensitive_types_differ_by_release() -> None:
    assert set(probes.KNOWN_SENSITIVE) == set(V1_13.sensitive_types)
    added_v1_14 = set(V1_14.sensitive_types) - set(V1_13.sensitive_types)
    assert added_v1_14 == {
        "AuthenticationConfigs.kubernetes.talos.dev",
        "EtcdEncryptionConfigs.kubernetes.talos.dev",
        "CustomizationConfigs.cri.talos.dev",
    }
    only_v1_12 = set(V1_12.sensitive_types) - set(V1_13.sensitive_types)
    assert only_v1_12 == {"MaintenanceServiceCertificates.secrets.talos.dev"}


# --------------------------------------------------------------------------- the header line


def _fake_cluster(tag: str) -> Any:
    version = SimpleNamespace(tag=tag, platform="metal")
    node = SimpleNamespace(
        unreachable=None, version=version, name="cp-1", address="10.5.0.2", role="controlplane"
    )
    return SimpleNamespace(talosconfig=None, nodes=[node])


def test_header_says_in_one_line_which_release_judges_an_unknown_one() -> None:
    from pytest_talos.plugin.session import _node_lines

    lines = _node_lines(_fake_cluster("v1.15.1"))
    assert lines[0] == "talos: node cp-1 (10.5.0.2): controlplane, Talos v1.15.1, platform metal"
    assert lines[1].startswith("talos: node cp-1: Talos v1.15.1 is not a release this kit knows")
    assert "judged by v1.14" in lines[1]
    assert len(lines) == 2


def test_header_adds_nothing_for_a_known_release() -> None:
    from pytest_talos.plugin.session import _node_lines

    assert len(_node_lines(_fake_cluster("v1.12.11"))) == 1
