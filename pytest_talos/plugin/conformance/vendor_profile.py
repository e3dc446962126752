"""The vendor acceptance profile (``--talos-profile PATH``): what an image must look like.

A YAML file the vendor or the customer writes; every section is optional and a check whose
expectation is missing skips with the reason. ``conformance/profiles/example-vendor.yaml``
documents every key. Errors are :class:`~pytest_talos.errors.ConfigError` naming the key.
:class:`VerificationPolicy` reads a node's ImageVerificationConfig rules as Talos applies them
(``vendor.image-verification``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_talos.errors import ConfigError
from pytest_talos.plugin.conformance.security_settings import SETTING_KEYS, canonical_rule

__all__ = [
    "VERIFIERS",
    "PortExpectations",
    "VendorProfile",
    "VerificationPolicy",
    "load_vendor_profile",
    "parse_vendor_profile",
    "rule_action",
    "version_matches",
]

_TOP_KEYS = frozenset(
    {
        "version",
        "name",
        "description",
        "talos",
        "kubernetes",
        "kernel",
        "platform",
        "extensions",
        "ports",
        "image_verification",
        "security_settings",
    }
)
_ROLES = ("controlplane", "worker")
# ImageVerificationConfig: the verifiers a rule may name
# (pkg/machinery/config/types/security/image_verification.go), and image patterns that match
# every image reference (github.com/ryanuber/go-glob: `*` matches any text, `/` included).
VERIFIERS = ("keyless", "publicKey")
_CATCH_ALL = frozenset({"*", "**", "*/*", "**/*"})


def _normalise_version(text: str) -> str:
    return text.strip().removeprefix("v")


def _release_under(prefix: str, version: str) -> bool:
    """``version`` is a release below ``prefix`` (``1.13`` -> ``1.13.9``), not a pre-release
    or a build of one (``1.13.9-rc.1``, ``1.13.9-dirty``, ``1.13.9+meta``)."""
    rest = version.removeprefix(prefix + ".") if version.startswith(prefix + ".") else ""
    return bool(rest) and all(part.isdigit() for part in rest.split("."))


def version_matches(expected: str, actual: str, *, local_version: bool = False) -> bool:
    """A full ``v1.13.9`` matches only ``v1.13.9``; ``v1.13``, ``v1.13.x`` and ``1.13.*``
    match any release v1.13.z. A pre-release or build (``v1.14.0-rc.1``, ``v1.13.9-dirty``)
    matches only when named exactly: Talos and Kubernetes tag pre-releases ``-alpha.N``,
    ``-beta.N``, ``-rc.N``.

    ``local_version``: ``actual`` is a kernel release, whose ``-talos`` style suffix is the
    build's local version, not a pre-release: ``6.18`` and ``6.18.24`` match ``6.18.24-talos``.
    """
    want = _normalise_version(expected)
    for wildcard in (".x", ".*"):
        want = want.removesuffix(wildcard)
    have = _normalise_version(actual)
    if have == want:
        return True
    if local_version and "-" not in want:
        have = have.partition("-")[0]
    if have == want:
        return True
    return want.count(".") < 2 and _release_under(want, have)


@dataclass(frozen=True)
class PortExpectations:
    expected: Mapping[str, frozenset[int]] = field(default_factory=dict)  # role -> ports
    # None: the profile sets no ports.forbidden; empty: it forbids none (a met expectation)
    forbidden: frozenset[int] | None = None

    def expected_for(self, role: str) -> frozenset[int]:
        return self.expected.get(role, frozenset())


@dataclass(frozen=True)
class VendorProfile:
    """A parsed, validated acceptance profile. ``None`` / empty means "not specified"."""

    source: str
    name: str = ""
    description: str = ""
    talos_version: str | None = None
    kubernetes_version: str | None = None
    kernel_version: str | None = None
    kernel_args_present: tuple[str, ...] = ()
    kernel_args_absent: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    # None: the profile sets no extensions.required; (): it requires none (a met expectation).
    extensions_required: tuple[str, ...] | None = None
    # None: the profile sets no extensions.forbidden; (): it forbids none (a met expectation)
    extensions_forbidden: tuple[str, ...] | None = None
    # (name, version): the extension must be installed at exactly this version
    extensions_versions: tuple[tuple[str, str], ...] = ()
    ports: PortExpectations = field(default_factory=PortExpectations)
    image_verification_required: bool | None = None
    # None: the profile sets no image_verification.rules; (): the node must have none.
    # Each rule canonical (security_settings.canonical_rule), in order.
    image_verification_rules: tuple[Mapping[str, Any], ...] | None = None
    # role -> {setting key: value}; None: the profile sets no security_settings
    security_settings: Mapping[str, Mapping[str, Any]] | None = None

    @property
    def has_kernel_args(self) -> bool:
        return bool(self.kernel_args_present or self.kernel_args_absent)

    @property
    def has_extensions(self) -> bool:
        return (
            self.extensions_required is not None
            or self.extensions_forbidden is not None
            or bool(self.extensions_versions)
        )

    @property
    def has_ports(self) -> bool:
        return bool(self.ports.expected) or self.ports.forbidden is not None


class _Reader:
    """Typed access to the YAML mapping; every error names the file and the key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, why: str) -> ConfigError:
        return ConfigError(
            f"{why}; see conformance/profiles/example-vendor.yaml", path=self.source, key=key
        )

    def mapping(self, value: Any, key: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(key, "must be a mapping")
        return value

    def text(self, value: Any, key: str) -> str | None:
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # `version: 6.18` parses as a float
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, "must be a non-empty string")
        return value.strip()

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "must be a list of strings")
        return tuple(v.strip() for v in value)

    def ports(self, value: Any, key: str) -> frozenset[int]:
        if value is None:
            return frozenset()
        if not isinstance(value, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535 for p in value
        ):
            raise self.fail(key, "must be a list of TCP port numbers (1-65535)")
        return frozenset(value)

    def only_keys(self, data: Mapping[str, Any], allowed: frozenset[str], key: str) -> None:
        unknown = sorted(set(map(str, data)) - allowed)
        if unknown:
            raise self.fail(
                key or "(top level)",
                f"unknown keys {unknown}; allowed: {', '.join(sorted(allowed))}",
            )


def _parse_ports(r: _Reader, data: Mapping[str, Any]) -> PortExpectations:
    section = r.mapping(data.get("ports"), "ports")
    r.only_keys(section, frozenset({"expected", "forbidden"}), "ports")
    expected_raw = section.get("expected")
    expected: dict[str, frozenset[int]] = {}
    if isinstance(expected_raw, list):  # the same list for every role
        expected = {role: r.ports(expected_raw, "ports.expected") for role in _ROLES}
    else:
        by_role = r.mapping(expected_raw, "ports.expected")
        r.only_keys(by_role, frozenset(_ROLES), "ports.expected")
        expected = {role: r.ports(by_role.get(role), f"ports.expected.{role}") for role in by_role}
    forbidden = section.get("forbidden")
    return PortExpectations(
        expected=expected,
        forbidden=None if forbidden is None else r.ports(forbidden, "ports.forbidden"),
    )


def _parse_versions(r: _Reader, value: Any) -> tuple[tuple[str, str], ...]:
    versions = r.mapping(value, "extensions.versions")
    pairs = []
    for name, version in versions.items():
        if not isinstance(version, str) or not version.strip():
            raise r.fail(
                f"extensions.versions.{name}",
                'must be a version string (quote it: "1.2" is a number in YAML)',
            )
        pairs.append((str(name), version.strip()))
    return tuple(sorted(pairs))


def _parse_image_verification(r: _Reader, data: Mapping[str, Any]) -> bool | None:
    section = r.mapping(data.get("image_verification"), "image_verification")
    r.only_keys(section, frozenset({"required", "rules"}), "image_verification")
    required = section.get("required")
    if required is not None and not isinstance(required, bool):
        raise r.fail("image_verification.required", "must be true or false")
    return required


_RULE_KEYS = frozenset({"image", "skip", "deny", "keyless", "publicKey"})


def _parse_rules(r: _Reader, data: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...] | None:
    raw = r.mapping(data.get("image_verification"), "image_verification").get("rules")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise r.fail("image_verification.rules", "must be a list of rules ([]: none expected)")
    rules = []
    for index, rule in enumerate(raw):
        key = f"image_verification.rules[{index}]"
        rule = r.mapping(rule, key)
        r.only_keys(rule, _RULE_KEYS, key)
        if not isinstance(rule.get("image"), str) or not rule["image"]:
            raise r.fail(f"{key}.image", "must be the rule's image pattern")
        rules.append(canonical_rule(rule))
    return tuple(rules)


def _parse_settings(r: _Reader, data: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]] | None:
    if data.get("security_settings") is None:
        return None
    section = r.mapping(data["security_settings"], "security_settings")
    r.only_keys(section, frozenset(_ROLES), "security_settings")
    settings = {}
    for role, values in section.items():
        values = r.mapping(values, f"security_settings.{role}")
        r.only_keys(values, SETTING_KEYS, f"security_settings.{role}")
        settings[str(role)] = dict(values)
    return settings


def parse_vendor_profile(data: Any, source: str) -> VendorProfile:
    """Validate the parsed YAML of a profile."""
    r = _Reader(source)
    if not isinstance(data, Mapping):
        raise r.fail("(top level)", "the profile must be a YAML mapping")
    r.only_keys(data, _TOP_KEYS, "")
    if data.get("version", 1) != 1:
        raise r.fail("version", "only profile format version 1 is known")
    talos = r.mapping(data.get("talos"), "talos")
    kubernetes = r.mapping(data.get("kubernetes"), "kubernetes")
    kernel = r.mapping(data.get("kernel"), "kernel")
    extensions = r.mapping(data.get("extensions"), "extensions")
    args = r.mapping(kernel.get("args"), "kernel.args")
    r.only_keys(talos, frozenset({"version"}), "talos")
    r.only_keys(kubernetes, frozenset({"version"}), "kubernetes")
    r.only_keys(kernel, frozenset({"version", "args"}), "kernel")
    r.only_keys(args, frozenset({"present", "absent"}), "kernel.args")
    r.only_keys(extensions, frozenset({"required", "forbidden", "versions"}), "extensions")
    return VendorProfile(
        source=source,
        name=r.text(data.get("name"), "name") or Path(source).stem,
        description=r.text(data.get("description"), "description") or "",
        talos_version=r.text(talos.get("version"), "talos.version"),
        kubernetes_version=r.text(kubernetes.get("version"), "kubernetes.version"),
        kernel_version=r.text(kernel.get("version"), "kernel.version"),
        kernel_args_present=r.strings(args.get("present"), "kernel.args.present"),
        kernel_args_absent=r.strings(args.get("absent"), "kernel.args.absent"),
        platforms=r.strings(data.get("platform"), "platform"),
        extensions_required=None
        if extensions.get("required") is None
        else r.strings(extensions["required"], "extensions.required"),
        extensions_forbidden=None
        if extensions.get("forbidden") is None
        else r.strings(extensions["forbidden"], "extensions.forbidden"),
        extensions_versions=_parse_versions(r, extensions.get("versions")),
        ports=_parse_ports(r, data),
        image_verification_required=_parse_image_verification(r, data),
        image_verification_rules=_parse_rules(r, data),
        security_settings=_parse_settings(r, data),
    )


def load_vendor_profile(path: str | Path) -> VendorProfile:
    """Read and validate a profile file (``--talos-profile``)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the vendor profile ({exc.strerror}); check --talos-profile",
            path=str(file),
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", path=str(file)) from None
    return parse_vendor_profile(data, str(file))


# --------------------------------------------------------------------------- the node's policy


def rule_action(rule: Mapping[str, Any]) -> str:
    """What Talos does with an image the rule matches: ``deny``, ``skip`` (pulled
    unverified), ``keyless`` or ``publicKey`` (verified), ``none`` (a rule validation
    refuses). ``internal/pkg/containers/image/verify/verify.go`` ImageSignature checks deny,
    then skip, then verifies with the rule's verifier."""
    if rule.get("deny") is True:
        return "deny"
    if rule.get("skip") is True:
        return "skip"
    return next((kind for kind in VERIFIERS if rule.get(kind)), "none")


@dataclass(frozen=True)
class VerificationPolicy:
    """The rules as Talos applies them: in order, the first match wins
    (``pkg/machinery/resources/security/image_verification_rule.go``
    ImageVerificationRuleMatcher), so a catch-all pattern hides every rule after it."""

    rules: tuple[tuple[str, str], ...]  # (image pattern, action), the reachable ones
    unreachable: tuple[str, ...] = ()  # patterns after the first catch-all

    @classmethod
    def of(cls, rules: list[dict[str, Any]]) -> VerificationPolicy:
        reachable: list[tuple[str, str]] = []
        for index, rule in enumerate(rules):
            reachable.append((str(rule.get("image", "?")), rule_action(rule)))
            if reachable[-1][0] in _CATCH_ALL:
                later = tuple(str(r.get("image", "?")) for r in rules[index + 1 :])
                return cls(tuple(reachable), later)
        return cls(tuple(reachable))

    @property
    def catch_all(self) -> tuple[str, str] | None:
        """The first rule matching every image, if any: it decides every image no earlier
        rule matched."""
        last = self.rules[-1] if self.rules else None
        return last if last is not None and last[0] in _CATCH_ALL else None

    @property
    def verifying(self) -> list[str]:
        return [pattern for pattern, action in self.rules if action in VERIFIERS]

    def unverified_note(self) -> str:
        """Why some images are pulled unverified ("": none is)."""
        catch_all = self.catch_all
        if catch_all is None:
            return _NOT_FAIL_CLOSED
        pattern, action = catch_all
        if action != "skip":
            return ""
        if not self.verifying:
            return (
                f"the first ImageVerificationConfig rule matching every image ({pattern}) "
                "skips verification: verification is off, no image is verified"
            )
        return (
            f"the rule for every image ({pattern}) skips verification: an image outside "
            f"{', '.join(self.verifying)} is pulled unverified"
        )


_NOT_FAIL_CLOSED = (
    "Talos pulls an image that matches no ImageVerificationConfig rule without "
    "verifying it (verification is not fail-closed)"
)
