"""Semantic validation of an accepted document set, worded as Talos words it
(``pkg/machinery/config/types/v1alpha1/v1alpha1_validation.go`` and each document's
``Validate``)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from pytest_talos.emulator.machineconfig.common import (
    NO_V1ALPHA1_MESSAGE,
    ValidationOutcome,
    as_mapping,
    go_quote,
    invalid_argument,
    multierror,
    string_map,
)
from pytest_talos.emulator.machineconfig.loader import construct_value, parse_documents


def validate(
    data: bytes, *, maintenance: bool = False, container_mode: bool = False
) -> ValidationOutcome:
    """Accept ``data`` (with its warnings) or raise :class:`ConfigRejected`.

    ``container_mode`` adds the checks a container-platform node makes (host DNS on).
    """
    documents = parse_documents(data)
    main = next((doc for doc in documents if doc.kind == "v1alpha1"), None)
    if main is None and not maintenance:
        raise invalid_argument(NO_V1ALPHA1_MESSAGE)
    errors: list[str] = []
    warnings: list[str] = []
    main_data: dict[str, Any] = construct_value(main.node) if main is not None else {}
    if main is not None:
        main_errors = _validate_v1alpha1(main_data, warnings, container_mode)
        if main_errors:
            errors.append(f"v1alpha1.Config: {multierror(main_errors)}")
    for doc in documents:
        if doc.kind == "HostnameConfig":
            errors.extend(_validate_hostname_config(construct_value(doc.node), main_data))
    if errors:
        raise invalid_argument(multierror(errors))
    return ValidationOutcome(warnings)


def _validate_v1alpha1(config: dict[str, Any], warnings: list[str], container: bool) -> list[str]:
    machine = config.get("machine")
    if not isinstance(machine, dict):
        return ["machine instructions are required"]
    mtype = str(machine.get("type") or "")
    errors = _validate_cluster(config.get("cluster"), mtype in ("controlplane", "init"))
    if container:
        errors += _container_mode_errors(machine)
    errors += _machine_ca_errors(machine, as_mapping(config.get("cluster")), mtype)
    errors += _cni_errors(config, mtype, warnings)
    host = as_mapping(machine.get("network")).get("hostname")
    if host and not _valid_hostname(str(host)):
        errors.append(f"invalid hostname {go_quote(str(host))}")
    if as_mapping(machine.get("install")).get("extensions"):
        warnings.append(
            ".machine.install.extensions is deprecated, please see "
            "https://www.talos.dev/latest/talos-guides/install/boot-assets/"
        )
    errors += _label_errors(machine)
    if config.get("persist") is False:
        errors.append(".persist should be enabled")
    return errors


def _validate_cluster(cluster: Any, control_plane: bool) -> list[str]:
    if not isinstance(cluster, dict):
        return ["cluster instructions are required"]
    endpoint = as_mapping(cluster.get("controlPlane")).get("endpoint")
    if not endpoint:
        return ["cluster controlplane endpoint is required"]
    errors: list[str] = []
    if not _valid_endpoint(str(endpoint)):
        errors.append(
            f"invalid controlplane endpoint: {go_quote(str(endpoint))} is not a valid endpoint URL"
        )
    network = as_mapping(cluster.get("network"))
    domain = network.get("dnsDomain")
    if domain and not _valid_dns_name(str(domain)):
        errors.append(f"{go_quote(str(domain))} is not a valid DNS name")
    for what, key in (("pod", "podSubnets"), ("service", "serviceSubnets")):
        for cidr in network.get(key) or ():
            if not _valid_cidr(str(cidr)):
                errors.append(
                    f"invalid {what} subnet {go_quote(str(cidr))}: invalid CIDR address: {cidr}"
                )
    if not control_plane and cluster.get("etcd"):
        errors.append("etcd config is only allowed on control plane machines")
    if not control_plane and as_mapping(cluster.get("ca")).get("key"):
        errors.append("cluster CA key is not allowed on non-controlplane nodes (.cluster.ca)")
    return errors


def _container_mode_errors(machine: dict[str, Any]) -> list[str]:
    host_dns = as_mapping(as_mapping(machine.get("features")).get("hostDNS"))
    errors = []
    if host_dns.get("enabled") is not True:
        errors.append(
            "feature HostDNS should be enabled in container mode "
            "(.machine.features.hostDNS.enabled)"
        )
    if host_dns.get("forwardKubeDNSToHost") is not True:
        errors.append(
            "feature HostDNS should forward kube-dns to host in container mode "
            "(.machine.features.hostDNS.forwardKubeDNSToHost)"
        )
    return errors


def _machine_ca_errors(machine: dict[str, Any], cluster: dict[str, Any], mtype: str) -> list[str]:
    ca = as_mapping(machine.get("ca"))
    errors = []
    if not ca and not machine.get("acceptedCAs"):
        errors.append(
            "issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)"
        )
    if mtype == "worker":
        if ca.get("key"):
            errors.append(
                "issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)"
            )
        if as_mapping(cluster.get("ca")).get("key"):
            errors.append(
                "issuing Kubernetes API CA key is not allowed on non-controlplane "
                "nodes (.cluster.ca)"
            )
    elif mtype not in ("controlplane", "init"):
        errors.append(f"unknown machine type {go_quote(mtype)}")
    return errors


def _cni_errors(config: dict[str, Any], mtype: str, warnings: list[str]) -> list[str]:
    if mtype not in ("controlplane", "init"):
        return []
    cni = as_mapping(as_mapping(as_mapping(config.get("cluster")).get("network")).get("cni"))
    name, urls = str(cni.get("name") or "flannel"), cni.get("urls") or []
    if name not in ("flannel", "custom", "none"):
        return ['cni name should be one of ["flannel", "custom", "none"]']
    if name != "custom" and urls:
        return [f'"urls" field should be empty for {go_quote(name)} CNI']
    if name == "custom" and not urls:
        warnings.append('"urls" field should not be empty for "custom" CNI')
    return []


# Kubernetes label syntax (as Talos's pkg/machinery/labels checks it).
_DNS1123_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Talos records what it owns on the Node in these annotations.
_RESERVED_ANNOTATIONS = frozenset(
    {
        "talos.dev/owned-labels",
        "talos.dev/owned-annotations",
        "talos.dev/owned-taints",
    }
)


def _qualified_name_error(value: str) -> str | None:
    parts = value.split("/")
    if len(parts) > 2:
        return f"invalid format: too many slashes: {go_quote(value)}"
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return f"prefix cannot be empty: {go_quote(value)}"
        if len(prefix) > 253:
            return (
                f"prefix {go_quote(prefix)} is invalid: domain name length exceeds limit of "
                f"253: {go_quote(prefix)}"
            )
        if not _DNS1123_SUBDOMAIN.match(prefix):
            return (
                f"prefix {go_quote(prefix)} is invalid: domain doesn't match required format: "
                f"{go_quote(prefix)}"
            )
    if not name:
        return f"name cannot be empty: {go_quote(value)}"
    if len(name) > 63:
        return f"name is too long: {go_quote(value)} (limit is 63)"
    if not _QUALIFIED_NAME.match(name):
        return f"name {go_quote(name)} is invalid"
    return None


def _label_value_error(value: str) -> str | None:
    if len(value) > 63:
        return f"label value length exceeds limit of 63: {go_quote(value)}"
    if value and not _QUALIFIED_NAME.match(value):
        return f"label value {go_quote(value)} is invalid"
    return None


def _taint_errors(value: str) -> list[str]:
    text, colon, effect = value.partition(":")
    if not colon:
        effect = text
    if effect not in _TAINT_EFFECTS:
        return [f"invalid taint effect: {go_quote(effect)}"]
    value_error = _label_value_error(text) if colon else None
    return [value_error] if value_error else []


def _label_errors(machine: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    for field_name, what in (
        ("nodeLabels", "labels"),
        ("nodeAnnotations", "annotations"),
        ("nodeTaints", "taints"),
    ):
        problems: list[str] = []
        for key, value in sorted(string_map(machine.get(field_name)).items()):
            key_error = _qualified_name_error(key)
            if key_error:
                problems.append(key_error)
                if what == "taints":
                    continue
            if what == "labels":
                problems += filter(None, [_label_value_error(value)])
            elif what == "taints":
                problems += _taint_errors(value)
            elif key in _RESERVED_ANNOTATIONS:
                problems.append(f"annotation {go_quote(key)} is reserved")
        if problems:
            errors.append(f"invalid machine node {what}: {multierror(problems)}")
    return errors


_AUTO_HOSTNAME_KINDS = ("off", "default", "stable")


def _validate_hostname_config(doc: dict[str, Any], main: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    host, auto = str(doc.get("hostname") or ""), str(doc.get("auto") or "")
    if auto and auto not in _AUTO_HOSTNAME_KINDS:
        problems.append(f"invalid auto hostname kind {go_quote(auto)}")
    if host and auto and auto != "off":
        problems.append("'auto' and 'hostname' cannot be set at the same time")
    if not host and not auto:
        problems.append("either 'auto' or 'hostname' must be set")
    if host and not _valid_hostname(host):
        problems.append(f"invalid hostname {go_quote(host)}")
    errors = []
    if problems:
        text = problems[0] if len(problems) == 1 else multierror(problems)
        errors.append(f"HostnameConfig: {text}")
    legacy = as_mapping(as_mapping(main.get("machine")).get("network")).get("hostname")
    if legacy and host:
        errors.append("static hostname is already set in v1alpha1 config")
    return errors


_HOST_LABEL = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")
_DNS_NAME = re.compile(
    r"^(?:[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(?:\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?$"
)


def _valid_hostname(name: str) -> bool:
    labels = name.rstrip(".").split(".")
    return len(name) <= 253 and all(_HOST_LABEL.match(label) for label in labels)


def _valid_dns_name(name: str) -> bool:
    return bool(name) and len(name) - name.count(".") <= 255 and bool(_DNS_NAME.match(name))


def _valid_cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _valid_endpoint(text: str) -> bool:
    try:
        parts = urlsplit(text)
        _ = parts.port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
