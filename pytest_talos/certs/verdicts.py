"""Verdicts on certificates: :class:`Finding` lists (a failure or a warning each), so that a
caller decides what to do, and the :class:`CertificateReport` on one certificate.

A long-lived certificate is judged by an :class:`ExpiryPolicy` (days before expiry to warn
and to fail); a short-lived one that Talos renews at half its lifetime by
:func:`renewal_findings` (less than :data:`RENEWAL_FLOOR` of it left: renewal is stuck).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cryptography import x509

from pytest_talos.certs.facts import (
    SECONDS_PER_DAY,
    CertificateFacts,
    certificate_facts,
    duration_text,
    issuer_among,
    utc_now,
    utc_text,
)

__all__ = [
    "APID_CERT_LIFETIME",
    "DEFAULT_FAIL_DAYS",
    "DEFAULT_WARN_DAYS",
    "RENEWAL_FLOOR",
    "CertificateReport",
    "ExpiryPolicy",
    "Finding",
    "Level",
    "chain_findings",
    "lifetime_findings",
    "name_findings",
    "renewal_findings",
    "validity_findings",
]

DEFAULT_WARN_DAYS = 30.0
DEFAULT_FAIL_DAYS = 7.0
# Talos renews apid's (and kube-apiserver's) certificate at half its lifetime; one with less
# than a quarter left was not renewed when it should have been.
RENEWAL_FLOOR = 0.25
# How long Talos makes apid's certificate valid: siderolabs/crypto x509
# DefaultCertificateValidityDuration, 24 hours from its NotBefore (controllers/secrets/api.go
# on control planes, trustd's signing of the worker's CSR: internal/app/trustd/internal/reg),
# refreshed every 12 hours. X.509 times have a second's precision: a minute is allowed.
APID_CERT_LIFETIME = 24 * 3600.0
_LIFETIME_SLACK = 60.0

Level = Literal["failure", "warning"]


@dataclass(frozen=True)
class Finding:
    level: Level
    message: str


@dataclass(frozen=True)
class ExpiryPolicy:
    """Days before expiry below which a long-lived certificate warns, and fails."""

    warn_days: float = DEFAULT_WARN_DAYS
    fail_days: float = DEFAULT_FAIL_DAYS

    def __post_init__(self) -> None:
        if not 0 <= self.fail_days <= self.warn_days:
            raise ValueError(
                f"need 0 <= fail days ({self.fail_days:g}) <= warn days ({self.warn_days:g})"
            )

    def judge(self, facts: CertificateFacts, what: str, now: dt.datetime) -> list[Finding]:
        found = validity_findings(facts, what, now)
        if found:
            return found
        left = facts.seconds_left(now)
        if left < self.fail_days * SECONDS_PER_DAY:
            return [
                Finding(
                    "failure",
                    f"{what} expires on {utc_text(facts.not_after)}, in "
                    f"{duration_text(left)} (fail under {self.fail_days:g} days)",
                )
            ]
        if left < self.warn_days * SECONDS_PER_DAY:
            return [
                Finding(
                    "warning",
                    f"{what} expires on {utc_text(facts.not_after)}, in "
                    f"{duration_text(left)} (warn under {self.warn_days:g} days)",
                )
            ]
        return []


def validity_findings(facts: CertificateFacts, what: str, now: dt.datetime) -> list[Finding]:
    """A failure when ``now`` is outside the certificate's validity; else none."""
    if now < facts.not_before:
        return [
            Finding(
                "failure",
                f"{what} is not valid before {utc_text(facts.not_before)}: "
                "check the clocks of this machine and the node",
            )
        ]
    if now >= facts.not_after:
        return [
            Finding(
                "failure",
                f"{what} expired on {utc_text(facts.not_after)}, "
                f"{duration_text(-facts.seconds_left(now))} ago",
            )
        ]
    return []


def renewal_findings(facts: CertificateFacts, what: str, now: dt.datetime) -> list[Finding]:
    """A short-lived, auto-renewed certificate: valid, and renewed on time."""
    found = validity_findings(facts, what, now)
    if found:
        return found
    left = facts.seconds_left(now)
    if facts.lifetime > 0 and left < RENEWAL_FLOOR * facts.lifetime:
        return [
            Finding(
                "failure",
                f"{what} has {duration_text(left)} of its {duration_text(facts.lifetime)} "
                "left: Talos renews it at half its lifetime, so renewal is stuck",
            )
        ]
    return []


def lifetime_findings(
    facts: CertificateFacts, what: str, longest: float = APID_CERT_LIFETIME
) -> list[Finding]:
    """A failure when the certificate is valid for longer than ``longest`` seconds (plus a
    minute): not one Talos issued, and one that never needs renewing."""
    if facts.lifetime <= longest + _LIFETIME_SLACK:
        return []
    return [
        Finding(
            "failure",
            f"{what} is valid for {duration_text(facts.lifetime)} "
            f"({utc_text(facts.not_before)} to {utc_text(facts.not_after)}); Talos issues it "
            f"for {duration_text(longest)} and renews it at half that, so it was not issued "
            "by the node's own certificate controller",
        )
    ]


def chain_findings(
    facts: CertificateFacts, cas: Sequence[x509.Certificate], what: str, ca_name: str
) -> tuple[list[Finding], CertificateFacts | None]:
    """A failure unless one of ``cas`` (``ca_name`` in the message) signed the certificate;
    with the facts of the issuer found."""
    cert = facts.certificate
    issuer = issuer_among(cert, cas) if cert is not None else None
    if issuer is None:
        return [
            Finding("failure", f"{what} (issuer {facts.issuer}) was not issued by {ca_name}")
        ], None
    return [], certificate_facts(issuer)


def name_findings(facts: CertificateFacts, names: Iterable[str], what: str) -> list[Finding]:
    """A failure naming each of ``names`` the certificate does not cover."""
    missing = [name for name in dict.fromkeys(names) if name and not facts.covers(name)]
    if not missing:
        return []
    return [
        Finding(
            "failure",
            f"{what} does not name {', '.join(missing)} (its names: "
            f"{', '.join(facts.names) or 'none'}): a client that reaches it by that name "
            "refuses it",
        )
    ]


@dataclass
class CertificateReport:
    """One certificate, what it was checked for, and what was found."""

    what: str
    facts: CertificateFacts | None
    findings: list[Finding] = field(default_factory=list)
    issuer: CertificateFacts | None = None
    how: str = ""  # where and how it was read
    now: dt.datetime = field(default_factory=utc_now)

    @property
    def failures(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "failure"]

    @property
    def warnings(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "warning"]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"certificate": self.what}
        if self.how:
            data["read"] = self.how
        if self.facts is not None:
            data.update(self.facts.to_json(self.now))
        if self.issuer is not None:
            data["issued_by"] = {"subject": self.issuer.subject, "serial": self.issuer.serial}
        if self.findings:
            data["findings"] = [f"{f.level}: {f.message}" for f in self.findings]
        return data
