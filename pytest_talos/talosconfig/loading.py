""":func:`load_talosconfig`: find, parse and validate a talosconfig, select its context."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterator, Mapping
from typing import Any

from pytest_talos.errors import ConfigError
from pytest_talos.talos_api import certificate_roles
from pytest_talos.talosconfig.credentials import check_validity, credentials
from pytest_talos.talosconfig.document import Where, parse_yaml, read_file
from pytest_talos.talosconfig.endpoints import normalize_endpoint
from pytest_talos.talosconfig.lookup import resolve_talosconfig_path
from pytest_talos.talosconfig.model import Context, TalosConfig

# A context key only the pytest-talos emulator writes: how many times faster than real time
# its nodes' clock runs. talosctl decodes the file without KnownFields, so it ignores the key
# (pkg/machinery/client/config/config.go ReadFrom); a real cluster's talosconfig has none.
TIME_SCALE_KEY = "x-pytest-talos-time-scale"
# Also written only by the emulator: an address of its /24 where no node lives. Ports open
# there are the host's own wildcard listeners, so the port scan leaves them out (scan baseline).
SCAN_BASELINE_KEY = "x-pytest-talos-scan-baseline"


class _NoEndpoints(tuple[str, ...]):
    """An empty endpoint list: falsy and printable, but using it raises why it is empty."""

    error: ConfigError

    def __new__(cls, error: ConfigError) -> _NoEndpoints:
        empty = super().__new__(cls, ())
        empty.error = error
        return empty

    def __iter__(self) -> Iterator[str]:
        raise self.error

    def __getitem__(self, index: Any) -> Any:
        raise self.error


def _select_context(
    where: Where, doc: dict[Any, Any], requested: str | None
) -> tuple[str, dict[Any, Any], tuple[str, ...]]:
    raw_contexts = doc.get("contexts")
    if not isinstance(raw_contexts, dict) or not raw_contexts:
        where.at("contexts").fail(
            "no contexts defined; use a talosconfig written by talosctl gen config "
            "(or add one with talosctl config merge)"
        )
    contexts = {str(name): value for name, value in raw_contexts.items()}
    names = tuple(sorted(contexts))
    chosen = requested or doc.get("context")
    available = ", ".join(names)
    if not chosen:
        where.at("context").fail(
            f"no context selected; choose one of {available} "
            "(talosctl config context NAME, or pass the context explicitly)"
        )
    chosen = str(chosen)
    if chosen not in contexts:
        key = "contexts" if requested else "context"
        where.at(key).fail(f"context {chosen!r} not found; available contexts: {available}")
    body = contexts[chosen]
    if not isinstance(body, dict):
        where.at(f"contexts[{chosen}]").fail("must be a mapping with endpoints, ca, crt and key")
    return chosen, body, names


def _string_list(where: Where, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        where.fail("must be a list of strings, e.g. [10.5.0.2]")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            where.at(f"{where.key}[{index}]").fail("must be a non-empty string")
    return [item.strip() for item in value]


def _endpoints(where: Where, body: dict[Any, Any]) -> tuple[str, ...]:
    endpoints = _string_list(where, body.get("endpoints"))
    if not endpoints:  # fine while the caller names an endpoint (--talos-endpoint)
        return _NoEndpoints(
            ConfigError(
                "no endpoints; set them with talosctl config endpoint <ip> [<ip> ...] "
                "(the control-plane node addresses), or name one (--talos-endpoint)",
                path=str(where.path),
                key=where.key,
            )
        )
    return tuple(
        normalize_endpoint(text, path=str(where.path), key=f"{where.key}[{index}]")
        for index, text in enumerate(endpoints)
    )


def _optional_str(where: Where, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        where.fail("must be a string")
    return value


def _time_scale(where: Where, value: Any) -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        where.fail("must be a positive number (how many times faster the emulated clock runs)")
    return float(value)


def _scan_baseline(where: Where, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or _ip_address(value) is None:
        where.fail("must be an IP address (where no node of the cluster lives)")
    return value


def _ip_address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def load_talosconfig(
    path: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    env: Mapping[str, str] = os.environ,
    now: dt.datetime | None = None,
) -> TalosConfig:
    """Find (see :func:`resolve_talosconfig_path`), parse and validate a talosconfig.

    ``context`` overrides the file's current context. Raises ConfigError on any problem.
    """
    found, source = resolve_talosconfig_path(path, env)
    where = Where(found)
    doc = parse_yaml(where, read_file(where))
    name, body, names = _select_context(where, doc, context)
    in_context = where.at(f"contexts[{name}]")
    endpoints = _endpoints(in_context.at(f"contexts[{name}].endpoints"), body)
    nodes = _string_list(in_context.at(f"contexts[{name}].nodes"), body.get("nodes"))
    cluster = _optional_str(in_context.at(f"contexts[{name}].cluster"), body.get("cluster"))
    creds = credentials(in_context, body)
    scale = _time_scale(
        in_context.at(f"contexts[{name}].{TIME_SCALE_KEY}"), body.get(TIME_SCALE_KEY)
    )
    baseline = _scan_baseline(
        in_context.at(f"contexts[{name}].{SCAN_BASELINE_KEY}"), body.get(SCAN_BASELINE_KEY)
    )
    moment = now or dt.datetime.now(dt.UTC)
    warning = check_validity(in_context.at(f"contexts[{name}].crt"), creds.leaf, moment)
    selected = Context(
        name=name,
        endpoints=endpoints,
        nodes=tuple(nodes),
        cluster=cluster,
        ca_pem=creds.ca_pem,
        crt_pem=creds.crt_pem,
        key_pem=creds.key_pem,
        time_scale=scale,
        scan_baseline=baseline,
    )
    return TalosConfig(
        path=found,
        source=source,
        context_name=name,
        contexts=names,
        context=selected,
        roles=certificate_roles(creds.leaf),
        not_before=creds.leaf.not_valid_before_utc,
        not_after=creds.leaf.not_valid_after_utc,
        key_type=creds.key_type,
        expiry_warning=warning,
    )
