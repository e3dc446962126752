"""Vendor image acceptance (profile ``vendor-image``): the nodes match the YAML acceptance
profile given with ``--talos-profile`` (see ``conformance/profiles/example-vendor.yaml``).

Each check skips, naming the profile key, when the profile does not ask for it.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

import pytest

from conformance._support.reach import VENDOR_SCAN_NEEDS, DirectReach
from conformance.kubernetes.node_lookup import registered_node
from conformance.upgrade.test_upgrade import installed_extensions
from pytest_talos.checks.kubernetes import read_kube_node
from pytest_talos.cluster import KubernetesAccess
from pytest_talos.errors import ConformanceFailure, NotFound, PermissionDenied
from pytest_talos.node import TalosNode
from pytest_talos.plugin.conformance import not_applicable
from pytest_talos.plugin.conformance.catalogue import CheckSpec
from pytest_talos.plugin.conformance.security_settings import (
    CONFIG_RESOURCE,
    plain,
    read_rules,
    read_settings,
    render_rule,
)
from pytest_talos.plugin.conformance.settings import SuiteSettings
from pytest_talos.plugin.conformance.vendor_profile import (
    VendorProfile,
    VerificationPolicy,
    version_matches,
)
from pytest_talos.talos_api import ADMIN

IMAGE_VERIFICATION_KIND = "ImageVerificationConfig"


class UnverifiedImagesWarning(UserWarning):
    """Talos pulls an image that matches no verification rule without verifying it."""


def _profile(
    suite: SuiteSettings, key: str, wanted: Callable[[VendorProfile], object]
) -> VendorProfile:
    profile = suite.vendor_profile
    if profile is None:
        pytest.skip(
            "no vendor acceptance profile: pass --talos-profile PATH "
            "(see conformance/profiles/example-vendor.yaml)"
        )
    if not wanted(profile):
        pytest.skip(f"the vendor profile {profile.name} sets no {key}")
    return profile


def _kernel_profile(
    suite: SuiteSettings, node: TalosNode, key: str, wanted: Callable[[VendorProfile], object]
) -> VendorProfile:
    """The profile of a kernel check: on a container platform the check is not applicable
    whatever the profile sets (the node runs the host's kernel, not the image's)."""
    if suite.vendor_profile is not None and node.version.in_container:
        not_applicable("container platform: the node runs the host's kernel, not the image's")
    return _profile(suite, key, wanted)


def _read(node: TalosNode, path: str, check: str) -> str:
    try:
        return node.files.read_text(path).strip()
    except NotFound:
        raise ConformanceFailure(check, f"the node does not serve {path}", node=node.name) from None


@pytest.mark.talos_check(
    "vendor.talos-version",
    severity="critical",
    claim="The node runs the Talos version the vendor profile names",
)
def test_talos_version_matches_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(talos_suite, "talos.version", lambda p: p.talos_version)
    wanted, tag = str(profile.talos_version), talos_node.version.tag
    talos_evidence.update(expected=wanted, running=tag)
    if not version_matches(wanted, tag):
        raise ConformanceFailure(
            talos_check_spec.id,
            "another Talos version runs",
            node=talos_node.name,
            expected=wanted,
            observed=tag,
        )


@pytest.mark.talos_check(
    "vendor.kubernetes-version",
    severity="high",
    claim="The node's kubelet runs the Kubernetes version the vendor profile names",
)
def test_kubernetes_version_matches_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    request: pytest.FixtureRequest,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(talos_suite, "kubernetes.version", lambda p: p.kubernetes_version)
    registration = registered_node(talos_node)
    kube: KubernetesAccess = request.getfixturevalue("talos_kubernetes")
    kube_node = read_kube_node(kube, talos_node, talos_check_spec.id)
    kubelet = str(kube_node.status.node_info.kubelet_version)
    wanted = str(profile.kubernetes_version)
    talos_evidence.update(expected=wanted, kubelet=kubelet, **registration.evidence())
    if not version_matches(wanted, kubelet):
        raise ConformanceFailure(
            talos_check_spec.id,
            "another Kubernetes version runs",
            node=talos_node.name,
            expected=wanted,
            observed=kubelet,
        )


@pytest.mark.talos_check(
    "vendor.kernel-version",
    severity="high",
    claim="The node's kernel is the release the vendor profile names (/proc/version)",
)
def test_kernel_version_matches_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _kernel_profile(talos_suite, talos_node, "kernel.version", lambda p: p.kernel_version)
    text = _read(talos_node, "/proc/version", talos_check_spec.id)
    parts = text.split()
    release = parts[2] if len(parts) > 2 and parts[:2] == ["Linux", "version"] else text
    wanted = str(profile.kernel_version)
    talos_evidence.update(expected=wanted, kernel=release)
    if not version_matches(wanted, release, local_version=True):
        raise ConformanceFailure(
            talos_check_spec.id,
            "another kernel runs",
            node=talos_node.name,
            expected=wanted,
            observed=release,
        )


def _arg_present(arg: str, tokens: list[str]) -> bool:
    if "=" in arg:
        return arg in tokens
    return any(t == arg or t.startswith(arg + "=") for t in tokens)


@pytest.mark.talos_check(
    "vendor.kernel-args",
    severity="high",
    claim="The kernel command line has the arguments the profile requires and none it forbids",
)
def test_kernel_arguments_match_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _kernel_profile(talos_suite, talos_node, "kernel.args", lambda p: p.has_kernel_args)
    tokens = _read(talos_node, "/proc/cmdline", talos_check_spec.id).split()
    missing = [a for a in profile.kernel_args_present if not _arg_present(a, tokens)]
    forbidden = [a for a in profile.kernel_args_absent if _arg_present(a, tokens)]
    talos_evidence["cmdline"] = " ".join(tokens)
    if missing or forbidden:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the kernel command line does not match the profile",
            node=talos_node.name,
            expected="required present, forbidden absent",
            observed=f"missing: {', '.join(missing) or 'none'}; "
            f"forbidden present: {', '.join(forbidden) or 'none'}",
        )


@pytest.mark.talos_check(
    "vendor.platform",
    severity="medium",
    claim="The node runs on the platform the vendor profile names",
)
def test_platform_matches_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(talos_suite, "platform", lambda p: p.platforms)
    version = talos_node.version
    talos_evidence.update(
        expected=list(profile.platforms), platform=version.platform, mode=version.platform_mode
    )
    if version.platform not in profile.platforms:
        raise ConformanceFailure(
            talos_check_spec.id,
            "the node runs on another platform",
            node=talos_node.name,
            expected=" or ".join(profile.platforms),
            observed=version.platform,
        )


@pytest.mark.talos_check(
    "vendor.required-extensions",
    severity="high",
    claim="Every system extension the profile requires is installed, at the version the "
    "profile names for it",
)
def test_required_extensions_are_installed(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(
        talos_suite,
        "extensions.required",
        lambda p: p.extensions_required is not None or bool(p.extensions_versions),
    )
    installed = installed_extensions(talos_node)
    versions = dict(profile.extensions_versions)
    # an empty required list is an expectation (none required), met by any node
    wanted = list(dict.fromkeys([*(profile.extensions_required or ()), *versions]))
    talos_evidence.update(installed=installed, required=wanted)
    missing = [e for e in wanted if e not in installed]
    if missing:
        raise ConformanceFailure(
            talos_check_spec.id,
            "required extensions are missing",
            node=talos_node.name,
            expected=", ".join(wanted),
            observed=f"missing: {', '.join(missing)}",
        )
    other = {
        name: installed[name] for name, version in versions.items() if installed[name] != version
    }
    if other:
        raise ConformanceFailure(
            talos_check_spec.id,
            "extensions run another version than the profile names (extensions.versions)",
            node=talos_node.name,
            expected=", ".join(f"{name} {versions[name]}" for name in other),
            observed=", ".join(f"{name} {version}" for name, version in other.items()),
        )


@pytest.mark.talos_check(
    "vendor.forbidden-extensions",
    severity="high",
    claim="No system extension the profile forbids is installed",
)
def test_forbidden_extensions_are_absent(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(
        talos_suite, "extensions.forbidden", lambda p: p.extensions_forbidden is not None
    )
    forbidden = profile.extensions_forbidden or ()  # an empty list: none forbidden, met
    installed = installed_extensions(talos_node)
    talos_evidence["installed"] = installed
    present = [e for e in forbidden if e in installed]
    if present:
        raise ConformanceFailure(
            talos_check_spec.id,
            "forbidden extensions are installed",
            node=talos_node.name,
            expected="none of " + ", ".join(forbidden),
            observed=", ".join(present),
        )


@pytest.mark.talos_check(
    "vendor.expected-ports",
    severity="medium",
    claim="Every port the profile expects for the node's role is open",
)
def test_expected_ports_are_open(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_direct_reach: DirectReach,
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(talos_suite, "ports.expected", lambda p: p.ports.expected)
    wanted = profile.ports.expected_for(talos_node.role)
    if not wanted:
        pytest.skip(f"the vendor profile expects no ports for role {talos_node.role}")
    talos_direct_reach.require(talos_node, VENDOR_SCAN_NEEDS)
    scan = talos_node.scan_ports(sorted(wanted))
    closed = sorted(wanted - set(scan.open_ports))
    talos_evidence.update(expected=sorted(wanted), scan=scan.summary())
    if closed:
        raise ConformanceFailure(
            talos_check_spec.id,
            "expected ports are not open",
            node=talos_node.name,
            expected=sorted(wanted),
            observed=f"not open: {', '.join(map(str, closed))}",
        )


@pytest.mark.talos_check(
    "vendor.forbidden-ports", severity="high", claim="No port the profile forbids is open"
)
def test_forbidden_ports_are_closed(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_direct_reach: DirectReach,
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(talos_suite, "ports.forbidden", lambda p: p.ports.forbidden is not None)
    talos_direct_reach.require(talos_node, VENDOR_SCAN_NEEDS)
    forbidden = sorted(profile.ports.forbidden or ())
    if not forbidden:  # an empty list: none forbidden, met (nothing to scan)
        talos_evidence["forbidden"] = "none (the profile forbids no port)"
        return
    scan = talos_node.scan_ports(forbidden)
    talos_evidence.update(forbidden=forbidden, scan=scan.summary())
    if scan.open_ports:
        raise ConformanceFailure(
            talos_check_spec.id,
            "forbidden ports are open",
            node=talos_node.name,
            expected=f"closed: {forbidden}",
            observed=f"open: {', '.join(map(str, scan.open_ports))}",
        )


def _verification_rules(node: TalosNode) -> list[dict[str, Any]] | None:
    docs = [d for d in node.machine_config.documents if d.get("kind") == IMAGE_VERIFICATION_KIND]
    if not docs:
        return None
    return [rule for doc in docs for rule in (doc.get("rules") or []) if isinstance(rule, dict)]


def _policy_evidence(policy: VerificationPolicy) -> dict[str, Any]:
    evidence: dict[str, Any] = {"rules": [f"{p}: {a}" for p, a in policy.rules]}
    if policy.unreachable:
        evidence["never matched (after a rule for every image)"] = list(policy.unreachable)
    return evidence


@pytest.mark.talos_check(
    "vendor.image-verification",
    severity="medium",
    claim="Image signature verification is configured as the profile requires",
)
def test_image_verification_is_configured(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(
        talos_suite,
        "image_verification.required",
        lambda p: p.image_verification_required is not None,
    )
    rules = _verification_rules(talos_node)
    policy = VerificationPolicy.of(rules or [])
    if rules is None:
        talos_evidence["rules"] = "not configured"
    else:
        talos_evidence.update(_policy_evidence(policy))
    note = policy.unverified_note()
    if note:
        talos_evidence["warning"] = note
        warnings.warn(UnverifiedImagesWarning(f"{talos_node.name}: {note}"), stacklevel=1)
    if not profile.image_verification_required:
        return
    if rules is None:
        raise ConformanceFailure(
            talos_check_spec.id,
            "image signature verification is not configured",
            node=talos_node.name,
            expected=f"an {IMAGE_VERIFICATION_KIND} document with rules",
            observed="none in the machine config",
        )
    if not policy.verifying:
        raise ConformanceFailure(
            talos_check_spec.id,
            note
            if note and policy.catch_all is not None
            else "no image verification rule verifies signatures",
            node=talos_node.name,
            expected="a reachable rule with a keyless or publicKey verifier",
            observed="; ".join(talos_evidence["rules"]) or "no rules",
        )


@pytest.mark.talos_check(
    "vendor.image-verification-rules",
    severity="high",
    claim="The node's image-verification rules are, in order, the rules the profile names",
)
def test_image_verification_rules_match_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(
        talos_suite,
        "image_verification.rules",
        lambda p: p.image_verification_rules is not None,
    )
    try:
        rules, where = read_rules(talos_node)
    except PermissionDenied as exc:
        _skip_needs_admin(talos_node, f"{IMAGE_VERIFICATION_KIND} rules", exc)
    wanted = [dict(rule) for rule in profile.image_verification_rules or ()]
    talos_evidence.update(
        read_from=where,
        expected=[render_rule(r) for r in wanted] or "none",
        rules=[render_rule(r) for r in rules] or "none",
    )
    if rules != wanted:  # order matters: the first matching rule decides
        raise ConformanceFailure(
            talos_check_spec.id,
            "the image-verification rules differ from the profile's",
            node=talos_node.name,
            expected="; ".join(render_rule(r) for r in wanted) or "no rule",
            observed="; ".join(render_rule(r) for r in rules) or "no rule",
        )


def _skip_needs_admin(node: TalosNode, what: str, exc: PermissionDenied) -> NoReturn:
    """Skip naming the identity that reads ``what``; with os:admin a refusal is the node's."""
    roles = node.client.roles
    if ADMIN in roles:
        raise exc
    pytest.skip(
        f"needs {ADMIN}: {what} are read from the MachineConfig resource ({CONFIG_RESOURCE}, "
        f"sensitive); this talosconfig has {', '.join(roles) or 'no role'} ({exc.details})"
    )


@pytest.mark.talos_check(
    "vendor.security-settings",
    severity="high",
    claim="The machine config's security-relevant settings are those the profile names for "
    "the node's role",
)
def test_security_settings_match_profile(
    talos_node: TalosNode,
    talos_suite: SuiteSettings,
    talos_evidence: dict[str, Any],
    talos_check_spec: CheckSpec,
) -> None:
    profile = _profile(talos_suite, "security_settings", lambda p: p.security_settings is not None)
    wanted = (profile.security_settings or {}).get(talos_node.role)
    if wanted is None:
        pytest.skip(
            f"the vendor profile {profile.name} sets no security_settings.{talos_node.role}"
        )
    try:
        documents = talos_node.machine_config.documents
    except PermissionDenied as exc:
        _skip_needs_admin(talos_node, "the security settings", exc)
    found = read_settings(documents, talos_node.role)
    differ = {}
    for key, value in wanted.items():
        observed = found[key][0] if key in found else None  # another role's setting: unset
        if plain(value) != observed:
            differ[key] = (plain(value), observed)
    talos_evidence.update(read_from=f"{CONFIG_RESOURCE} ({ADMIN})", judged=sorted(wanted))
    if differ:
        talos_evidence["differ"] = {
            k: {"expected": e, "observed": o} for k, (e, o) in differ.items()
        }
        raise ConformanceFailure(
            talos_check_spec.id,
            f"{len(differ)} security setting(s) differ from the profile: {', '.join(differ)}",
            node=talos_node.name,
            expected="; ".join(f"{k}: {_shown(e)}" for k, (e, _) in differ.items()),
            observed="; ".join(f"{k}: {_shown(o)}" for k, (_, o) in differ.items()),
        )


def _shown(value: Any) -> str:
    return "null (not set)" if value is None else json.dumps(value, sort_keys=True)
