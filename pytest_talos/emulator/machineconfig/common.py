"""What the machine-config modules share: the guesses, defaults, the rejection and text helpers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_talos.emulator.errors import ConfigRejected
from pytest_talos.errors import StatusCode

INFERRED: tuple[str, ...] = (
    "Generated configs are one template per role, as `talosctl cluster create` hands out: "
    "no hostname in the config (a `HostnameConfig` document with `auto: stable`); the "
    "emulated platform names the node `<cluster>-<role>-<n>`, as docker's /etc/hostname and "
    "qemu's DHCP do.",
    "Generated configs carry no private keys: where Talos writes a key (`machine.ca.key`, "
    "`cluster.ca.key`, `cluster.aggregatorCA.key`, `cluster.serviceAccount.key`, "
    "`cluster.etcd.ca.key` on control planes) the emulator writes a base64 placeholder that "
    'is no key; workers get `key: ""` as in Talos. CA `crt` fields hold the PEM passed in or '
    "a recognisable placeholder; tokens, `cluster.id`, `cluster.secret` and "
    "`cluster.secretboxEncryptionSecret` are derived from a hash of the cluster name "
    "(deterministic, protecting nothing).",
    "Only the documentation comments of the main fields are written (talosctl writes one for "
    "every field, plus commented examples).",
    "Documents other than v1alpha1: `HostnameConfig` is decoded strictly (keys `hostname`, "
    "`auto`); other Talos 1.13 kinds are accepted without looking inside; an unknown kind fails "
    'with `"<kind>" "<apiVersion>": not registered`.',
    "Strict decoding reports unknown keys as `error decoding document <apiVersion>/<kind>/"
    "<name> (line N): unknown keys found during decoding:` followed by the unknown keys as YAML "
    "(4-space indent, keys sorted, source comments dropped). Type errors read `error decoding "
    "<kind> to *v1alpha1.Config: yaml: unmarshal errors:` then `line N: cannot unmarshal !!seq "
    "into string` lines, as Go's yaml.v3 words them; YAML syntax errors read `decode error: "
    "yaml: line N: <problem>` with libyaml's problem text (yaml.v3 is a port of libyaml, so "
    "most texts match; PyYAML's own wording where libyaml is missing).",
    "Node labels, annotations and taints are checked like Kubernetes label keys and values, and "
    'worded as `invalid machine node labels: <multierror>` (`name "my label" is invalid`, '
    '`prefix cannot be empty: …`, `label value "…" is invalid`, `label value length exceeds '
    "limit of 63: …`, `invalid format: too many slashes: …`, `invalid taint effect: …`, "
    '`annotation "talos.dev/owned-labels" is reserved`).',
    "`machine.kubelet.extraArgs` values must be scalars (a list or map is a type error); "
    '`podSubnets`/`serviceSubnets` entries must be CIDRs: `invalid pod subnet "x": invalid '
    "CIDR address: x` (and `invalid service subnet …`); a hostname must be a DNS name of "
    'labels of at most 63 characters: `invalid hostname "x"`; the control-plane endpoint '
    'must be an http(s) URL with a host: `invalid controlplane endpoint: "x" is not a valid '
    "endpoint URL`.",
    "`HostnameConfig` validation: `'auto' and 'hostname' cannot be set at the same time` "
    "(unless auto is `off`), `either 'auto' or 'hostname' must be set`, `invalid auto hostname "
    'kind "x"`; a static hostname in both documents gives `static hostname is already set in '
    "v1alpha1 config`. Document errors are prefixed with the document kind.",
    "Immediate-apply comparison treats an absent field, null, `{}` and `[]` as equal; the "
    "`diff:` in the immediate-mode error is the unified diff of the two v1alpha1 documents "
    "after the fields allowed to change have been copied from the old one.",
)

NO_V1ALPHA1_MESSAGE = (
    "the applied machine configuration doesn't contain v1alpha1 config, "
    "did you mean to patch the machine config instead?"
)
DEFAULT_POD_SUBNETS: tuple[str, ...] = ("10.244.0.0/16",)
DEFAULT_SERVICE_SUBNETS: tuple[str, ...] = ("10.96.0.0/12",)


@dataclass(frozen=True)
class ValidationOutcome:
    """An accepted config; ``warnings`` go into the ApplyConfiguration reply."""

    warnings: list[str] = field(default_factory=list)


def invalid_argument(message: str) -> ConfigRejected:
    return ConfigRejected(StatusCode.INVALID_ARGUMENT, message)


def multierror(errors: Sequence[str]) -> str:
    """hashicorp/go-multierror's text."""
    if len(errors) == 1:
        return f"1 error occurred:\n\t* {errors[0]}\n\n"
    points = "\n\t".join(f"* {error}" for error in errors)
    return f"{len(errors)} errors occurred:\n\t{points}\n\n"


def as_mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def string_map(value: Any) -> dict[str, str]:
    return {str(k): "" if v is None else scalar_text(v) for k, v in as_mapping(value).items()}


def go_quote(text: str) -> str:
    """Go's %q for ordinary text."""
    return json.dumps(text, ensure_ascii=False)


def scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
