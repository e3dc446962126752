"""What a vendor profile pins of a node's security: its image-verification rules and the
security-relevant settings of its machine config (``image_verification.rules`` and
``security_settings``; recorded by ``--talos-record-profile``, judged by
``vendor.image-verification-rules`` and ``vendor.security-settings``).

Where each is read, and with which identity (siderolabs/talos v1.13.9; v1.14.0-rc.1 the same):

* **Image-verification rules**: ``ImageVerificationRules.security.talos.dev`` in namespace
  ``security``, one per rule, ids ``0000``, ``0001``... in the config's order
  (``internal/app/machined/pkg/controllers/security/image_verification_config.go``). The type
  is not sensitive (``pkg/machinery/resources/security/image_verification_rule.go``): an
  ``os:reader`` reads it. A node that does not define the type (v1.12 has no image
  verification at all; the emulator does not serve it) is read from the
  ``ImageVerificationConfig`` document of its machine config instead, which needs os:admin.
* **Settings**: the MachineConfig resource (``MachineConfigs.config.talos.dev``
  ``config/v1alpha1``), which is sensitive: os:admin only (``internal/app/resources/access.go``).

Rules are compared in their canonical form (:func:`canonical_rule`): the pattern and what
Talos does with a matching image; a public key by the SHA-256 of its DER bytes, so the
profile carries no PEM and a re-wrapped PEM is the same key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_talos.errors import NotFound, PermissionDenied
from pytest_talos.node import TalosNode

__all__ = [
    "CONFIG_RESOURCE",
    "IMAGE_VERIFICATION_KIND",
    "IMAGE_VERIFICATION_RULES",
    "SETTINGS",
    "SETTING_KEYS",
    "Setting",
    "canonical_rule",
    "key_fingerprint",
    "plain",
    "read_rules",
    "read_settings",
    "render_rule",
    "rules_of_config",
]

ADMIN = "os:admin"
IMAGE_VERIFICATION_KIND = "ImageVerificationConfig"
IMAGE_VERIFICATION_RULES = ("ImageVerificationRules.security.talos.dev", "security")
CONFIG_RESOURCE = "MachineConfigs.config.talos.dev config/v1alpha1"
# a type the node has no definition for: the client finds none among its ResourceDefinitions
# (NotFound, as talosctl: pkg/machinery/client/resources.go), or the node refuses it
# (PermissionDenied, internal/app/resources/access.go)
_NOT_DEFINED = ("is not registered", "is not supported")

Documents = Sequence[Mapping[str, Any]]


# --------------------------------------------------------------------------- the rules


def key_fingerprint(pem: str) -> str:
    """SHA-256 (hex) of the DER bytes in a PEM block (``openssl pkey -pubin -outform DER |
    sha256sum``); of the stripped text when it is not PEM."""
    body = [line.strip() for line in pem.strip().splitlines() if not line.startswith("-----")]
    try:
        der = base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError):
        der = b""
    return hashlib.sha256(der or pem.strip().encode()).hexdigest()


def canonical_rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    """One rule as the profile writes it, from a config rule (``image``, ``skip``, ``deny``,
    ``keyless``, ``publicKey``), a resource spec (``imagePattern``, ``keylessVerifier``,
    ``publicKeyVerifier``) or a profile entry. Talos checks deny, then skip, then the
    verifier (``internal/pkg/containers/image/verify/verify.go``)."""
    image = str(rule.get("image", rule.get("imagePattern", "")))
    keyless = rule.get("keyless", rule.get("keylessVerifier"))
    public = rule.get("publicKey", rule.get("publicKeyVerifier"))
    if rule.get("deny") is True:
        return {"image": image, "deny": True}
    if rule.get("skip") is True:
        return {"image": image, "skip": True}
    if isinstance(keyless, Mapping):
        fields = ("issuer", "subject", "subjectRegex")
        return {"image": image, "keyless": {k: str(keyless[k]) for k in fields if keyless.get(k)}}
    if isinstance(public, Mapping):
        sha = public.get("sha256") or key_fingerprint(str(public.get("certificate", "")))
        return {"image": image, "publicKey": {"sha256": str(sha).lower()}}
    return {"image": image}  # no action: Talos's validation refuses such a rule


def render_rule(rule: Mapping[str, Any]) -> str:
    """One line: ``registry.k8s.io/*: keyless issuer=... subject=...``."""
    action = next((k for k in ("deny", "skip", "keyless", "publicKey") if k in rule), "none")
    detail = rule.get(action)
    shown = " ".join(f"{k}={v}" for k, v in detail.items()) if isinstance(detail, Mapping) else ""
    return f"{rule.get('image', '?')}: {action}" + (f" {shown}" if shown else "")


def rules_of_config(documents: Documents) -> list[dict[str, Any]]:
    """The rules of the config's ImageVerificationConfig document, canonical, in order."""
    return [
        canonical_rule(rule)
        for doc in documents
        if doc.get("kind") == IMAGE_VERIFICATION_KIND
        for rule in (doc.get("rules") or [])
        if isinstance(rule, Mapping)
    ]


def read_rules(node: TalosNode) -> tuple[list[dict[str, Any]], str]:
    """(canonical rules, where they were read). PermissionDenied when only the machine
    config has them and this identity is not os:admin."""
    kind, namespace = IMAGE_VERIFICATION_RULES
    try:
        items = node.resources(kind, namespace)
    except (NotFound, PermissionDenied) as exc:
        if not any(text in exc.details for text in _NOT_DEFINED):
            raise
        documents = node.machine_config.documents  # os:admin
        return rules_of_config(documents), (
            f"MachineConfig config/v1alpha1 ({ADMIN}): {IMAGE_VERIFICATION_KIND} rules; "
            f"the node does not define the type {kind.split('.')[0]}"
        )
    ordered = sorted(items, key=lambda item: item.id)  # ids 0000, 0001...: the config's order
    rules = [canonical_rule(item.spec or {}) for item in ordered if isinstance(item.spec, dict)]
    return rules, f"{kind} {namespace}/* (os:reader)"


# --------------------------------------------------------------------------- the settings


def plain(value: Any) -> Any:
    """A value as the profile and the node are compared: numbers as text (a sysctl is a
    string in the config, ``2`` in a hand-written profile), mappings and lists deep."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _v1alpha1(documents: Documents) -> Mapping[str, Any]:
    """The v1alpha1 document (the one without ``kind``)."""
    return next((d for d in documents if "kind" not in d and "machine" in d), {})


def _at(document: Mapping[str, Any], path: Sequence[str]) -> Any:
    found: Any = document
    for key in path:
        if not isinstance(found, Mapping):
            return None
        found = found.get(key)
    return found


def _named(documents: Documents, kind: str, name: str | None = None) -> Mapping[str, Any] | None:
    return next(
        (d for d in documents if d.get("kind") == kind and (name is None or d.get("name") == name)),
        None,
    )


@dataclass(frozen=True)
class Setting:
    """One pinned setting: its profile key, how it is read (value, where), and the roles
    whose configs carry it."""

    key: str
    read: Callable[[Documents], tuple[Any, str]]
    roles: frozenset[str] = frozenset({"controlplane", "worker"})


def _path(path: str, default: Any = None) -> Callable[[Documents], tuple[Any, str]]:
    def read(documents: Documents) -> tuple[Any, str]:
        value = _at(_v1alpha1(documents), path.split("."))
        return (default if value is None else value), path

    return read


def _names(path: str, field: str = "name") -> Callable[[Documents], tuple[Any, str]]:
    def read(documents: Documents) -> tuple[Any, str]:
        items = _at(_v1alpha1(documents), path.split(".")) or []
        names = [str(i.get(field)) for i in items if isinstance(i, Mapping)]
        return names, f"{path}[].{field}"

    return read


def _sysctl(name: str) -> Callable[[Documents], tuple[Any, str]]:
    def read(documents: Documents) -> tuple[Any, str]:
        sysctls = _at(_v1alpha1(documents), ("machine", "sysctls")) or {}
        value = sysctls.get(name) if isinstance(sysctls, Mapping) else None
        return (None if value is None else str(value)), f'machine.sysctls."{name}"'

    return read


_KEY_KINDS = ("static", "nodeID", "kms", "tpm")


def _encryption(label: str) -> Callable[[Documents], tuple[Any, str]]:
    """STATE/EPHEMERAL encryption: a VolumeConfig's ``encryption`` wins, else v1alpha1
    ``machine.systemDiskEncryption`` (controllers/block/internal/volumes/volumeconfig/
    system_volumes.go; both at once is a validation error, block/volume_config.go)."""

    def read(documents: Documents) -> tuple[Any, str]:
        volume = _named(documents, "VolumeConfig", label) or {}
        spec = volume.get("encryption")
        where = f"VolumeConfig {label} encryption"
        if not isinstance(spec, Mapping) or not spec.get("provider"):
            spec = _at(_v1alpha1(documents), ("machine", "systemDiskEncryption", label.lower()))
            where = f"machine.systemDiskEncryption.{label.lower()} (no VolumeConfig {label})"
        if not isinstance(spec, Mapping) or not spec.get("provider"):
            return None, where + ": not encrypted"
        keys = [
            next((kind for kind in _KEY_KINDS if key.get(kind) is not None), "?")
            for key in (spec.get("keys") or [])
            if isinstance(key, Mapping)
        ]  # the kinds of key, never their secrets
        return {"provider": str(spec["provider"]), "keys": keys}, where + " (provider, key kinds)"

    return read


def _default_action(documents: Documents) -> tuple[Any, str]:
    doc = _named(documents, "NetworkDefaultActionConfig") or {}
    return doc.get("ingress"), "NetworkDefaultActionConfig ingress (unset: accept)"


def _trusted_roots(documents: Documents) -> tuple[Any, str]:
    names = [str(d.get("name")) for d in documents if d.get("kind") == "TrustedRootsConfig"]
    return sorted(names), "TrustedRootsConfig documents: name"


# The hardening sysctls Talos sets itself (pkg/kernel/kspp/kspp.go GetKernelParams, the same
# at v1.12.11, v1.13.9 and v1.14.0-rc.1): machine.sysctls can override (weaken) each.
KSPP_SYSCTLS = (
    "dev.tty.ldisc_autoload",
    "dev.tty.legacy_tiocsti",
    "fs.protected_symlinks",
    "fs.protected_hardlinks",
    "fs.protected_fifos",
    "fs.protected_regular",
    "fs.suid_dumpable",
    "kernel.kptr_restrict",
    "kernel.dmesg_restrict",
    "kernel.perf_event_paranoid",
    "kernel.randomize_va_space",
    "kernel.yama.ptrace_scope",
    "user.max_user_namespaces",
    "kernel.unprivileged_bpf_disabled",
    "net.core.bpf_jit_harden",
    "vm.unprivileged_userfaultfd",
)
_CONTROL_PLANE = frozenset({"controlplane"})

# Paths are of pkg/machinery/config/types/v1alpha1/v1alpha1_types.go (v1.13.9). Secrets
# (encryption keys, cluster.secretboxEncryptionSecret) are never recorded.
SETTINGS: tuple[Setting, ...] = (
    Setting("machine.features.rbac", _path("machine.features.rbac")),
    Setting(
        "machine.features.apidCheckExtKeyUsage", _path("machine.features.apidCheckExtKeyUsage")
    ),
    Setting(
        "machine.features.kubernetesTalosAPIAccess",
        _path("machine.features.kubernetesTalosAPIAccess"),
    ),
    Setting("machine.install.extraKernelArgs", _path("machine.install.extraKernelArgs", [])),
    Setting("machine.kernel.modules", _names("machine.kernel.modules")),
    Setting(
        "machine.kubelet.defaultRuntimeSeccompProfileEnabled",
        _path("machine.kubelet.defaultRuntimeSeccompProfileEnabled"),
    ),
    Setting("machine.kubelet.extraArgs", _path("machine.kubelet.extraArgs", {})),
    Setting("machine.kubelet.extraConfig", _path("machine.kubelet.extraConfig", {})),
    Setting("machine.seccompProfiles", _names("machine.seccompProfiles")),
    *(Setting(f"machine.sysctls.{name}", _sysctl(name)) for name in KSPP_SYSCTLS),
    Setting("encryption.STATE", _encryption("STATE")),
    Setting("encryption.EPHEMERAL", _encryption("EPHEMERAL")),
    Setting("network.defaultAction.ingress", _default_action),
    Setting("trustedRoots", _trusted_roots),
    Setting(
        "cluster.allowSchedulingOnControlPlanes",
        _path("cluster.allowSchedulingOnControlPlanes"),
        _CONTROL_PLANE,
    ),
    Setting(
        "cluster.apiServer.admissionControl",
        _path("cluster.apiServer.admissionControl", []),
        _CONTROL_PLANE,
    ),
    Setting(
        "cluster.apiServer.auditPolicy", _path("cluster.apiServer.auditPolicy"), _CONTROL_PLANE
    ),
    Setting(
        "cluster.apiServer.extraArgs", _path("cluster.apiServer.extraArgs", {}), _CONTROL_PLANE
    ),
)
SETTING_KEYS = frozenset(setting.key for setting in SETTINGS)


def read_settings(documents: Documents, role: str) -> dict[str, tuple[Any, str]]:
    """``{key: (value, where)}`` of every setting of ``role``, values :func:`plain`."""
    found = {}
    for setting in SETTINGS:
        if role in setting.roles:
            value, where = setting.read(documents)
            found[setting.key] = (plain(value), where)
    return found
