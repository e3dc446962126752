"""pytest_talos.reporting: waivers, severity gate, redaction, results.json and the reports."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pytest

from pytest_talos.errors import ConfigError
from pytest_talos.reporting import (
    CheckRecord,
    RunInfo,
    TargetInfo,
    Waiver,
    apply_gate,
    build_results,
    find_waiver,
    load_waivers,
    parse_severity,
    parse_waivers,
    redact,
    render_html,
    render_markdown,
    severity_rank,
    validate_check_id,
    write_reports,
)

TODAY = dt.date(2026, 6, 1)
# A PEM-shaped fake key, assembled at run time so no key block stands in the source.
_LABEL = "ED25519 " + "PRIVATE KEY"
KEY_BODY = "MC4CAQAwBQYDK2VwBCIEIFakeFakeFakeFakeFakeFakeFakeFakeFakeFake"
FAKE_KEY_PEM = "-----" + f"BEGIN {_LABEL}-----\n{KEY_BODY}\n-----END {_LABEL}-----\n"


def record(
    check: str = "immutability.no-shell", outcome: str = "passed", **kw: object
) -> CheckRecord:
    fields: dict[str, object] = {
        "check_id": check,
        "severity": "critical",
        "claim": "There is no shell on the node.",
        "outcome": outcome,
        "node": "cp-1",
    }
    fields.update(kw)
    return CheckRecord(**fields)  # type: ignore[arg-type]


def run_info(**kw: object) -> RunInfo:
    fields: dict[str, object] = {
        "started": dt.datetime(2026, 6, 1, 10, 0, tzinfo=dt.UTC),
        "finished": dt.datetime(2026, 6, 1, 10, 1, tzinfo=dt.UTC),
        "suite": "quick",
        "targets": [TargetInfo("cp-1", "controlplane", "v1.13.9", "container", "127.0.0.2")],
    }
    fields.update(kw)
    return RunInfo(**fields)  # type: ignore[arg-type]


# ----------------------------------------------------------------- severity and ids


def test_severity_parses_case_insensitively_and_ranks_critical_first() -> None:
    assert parse_severity(" High ") == "high"
    ranks = [severity_rank(parse_severity(s)) for s in ("critical", "high", "medium", "low")]
    assert ranks == [0, 1, 2, 3]


def test_unknown_severity_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"unknown severity 'urgent'; use one of critical, high"):
        parse_severity("urgent")


@pytest.mark.parametrize("check_id", ["immutability.no-shell", "api.mtls-required", "a.b2"])
def test_well_formed_check_ids_are_accepted(check_id: str) -> None:
    assert validate_check_id(check_id) == check_id


@pytest.mark.parametrize("check_id", ["no-shell", "Immutability.no-shell", "api.bad_id", "a.-x"])
def test_malformed_check_ids_are_rejected_with_the_expected_form(check_id: str) -> None:
    with pytest.raises(ConfigError, match=r"<area>\.<claim-in-kebab-case>"):
        validate_check_id(check_id)


# ----------------------------------------------------------------- waivers


def test_waivers_parse_from_the_documented_layout(tmp_path: Path) -> None:
    path = tmp_path / "waivers.yaml"
    path.write_text(
        "waivers:\n"
        "  - check: immutability.only-expected-ports\n"
        "    node: worker-1\n"
        "    reason: node-exporter on 9100 (OPS-1)\n"
        "    expires: 2026-12-31\n"
        "  - check: services.no-recent-restarts\n"
        "    reason: flaky NTP\n"
        "    expires: '2026-07-01'\n"
    )
    first, second = load_waivers(path)
    assert first == Waiver(
        check="immutability.only-expected-ports",
        reason="node-exporter on 9100 (OPS-1)",
        expires=dt.date(2026, 12, 31),
        node="worker-1",
        source=f"{path}: waivers[0]",
    )
    assert second.node is None
    assert second.expires == dt.date(2026, 7, 1)


def test_an_empty_waivers_file_means_no_waivers(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("")
    assert load_waivers(path) == []
    assert parse_waivers({"waivers": None}) == []


def test_a_bare_list_of_waivers_is_accepted() -> None:
    waivers = parse_waivers([{"check": "api.mtls-required", "reason": "r", "expires": TODAY}])
    assert [w.check for w in waivers] == ["api.mtls-required"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"reason": "r", "expires": "2026-01-01"}, r"waivers\[0\]\.check is missing or empty"),
        ({"check": "api.x", "expires": "2026-01-01"}, r"waivers\[0\]\.reason is missing"),
        ({"check": "api.x", "reason": " "}, r"waivers\[0\]\.reason is missing or empty"),
        ({"check": "api.x", "reason": "r"}, r"expires is missing; waivers must expire"),
        ({"check": "api.x", "reason": "r", "expires": "soon"}, r"expires is 'soon'; .*YYYY-MM-DD"),
        ({"check": "api.x", "reason": "r", "expires": TODAY, "who": 1}, r"unknown keys \['who'\]"),
        ({"check": "api.x", "reason": "r", "expires": TODAY, "node": 3}, r"node must be a node"),
        ({"check": "API", "reason": "r", "expires": TODAY}, r"invalid check id 'API'"),
        ("api.x", r"waivers\[0\] must be a mapping"),
    ],
)
def test_invalid_waivers_are_refused_with_a_clear_message(entry: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_waivers({"waivers": [entry]}, source="w.yaml")


def test_waivers_file_shape_errors_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="only top-level key allowed is 'waivers'"):
        parse_waivers({"waivers": [], "extra": 1})
    with pytest.raises(ConfigError, match="'waivers' must be a list"):
        parse_waivers({"waivers": "all"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("waivers: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_waivers(bad)
    with pytest.raises(ConfigError, match="cannot read the waivers file"):
        load_waivers(tmp_path / "missing.yaml")


def test_a_waiver_for_an_unknown_check_is_refused_so_typos_do_not_waive_nothing() -> None:
    data = {"waivers": [{"check": "api.mtls-requird", "reason": "r", "expires": TODAY}]}
    with pytest.raises(ConfigError, match=r"there is no check 'api.mtls-requird'"):
        parse_waivers(data, source="w.yaml", known_checks={"api.mtls-required"})


def test_an_active_waiver_covers_its_check_on_its_node_only() -> None:
    waiver = Waiver("api.mtls-required", "r", dt.date(2026, 6, 1), node="cp-1")
    assert find_waiver([waiver], "api.mtls-required", "cp-1", TODAY).waives
    assert not find_waiver([waiver], "api.mtls-required", "worker-1", TODAY).waives
    assert not find_waiver([waiver], "api.other", "cp-1", TODAY).waives


def test_a_waiver_without_node_covers_every_node_and_the_cluster() -> None:
    waiver = Waiver("cluster.members-consistent", "r", TODAY)
    assert find_waiver([waiver], "cluster.members-consistent", None, TODAY).waives
    assert find_waiver([waiver], "cluster.members-consistent", "w-9", TODAY).waives


def test_an_expired_waiver_does_not_waive_and_says_so() -> None:
    expired = Waiver("api.mtls-required", "vendor fix pending", dt.date(2026, 5, 31))
    match = find_waiver([expired], "api.mtls-required", "cp-1", TODAY)
    assert not match.waives
    assert match.expired == expired
    assert match.expired_note() == (
        "waiver expired on 2026-05-31 (vendor fix pending); "
        "renew it in the waivers file or fix the node"
    )


def test_an_active_waiver_wins_over_an_expired_one_for_the_same_check() -> None:
    old = Waiver("api.mtls-required", "old", dt.date(2026, 1, 1))
    new = Waiver("api.mtls-required", "new", dt.date(2026, 12, 1))
    match = find_waiver([old, new], "api.mtls-required", "cp-1", TODAY)
    assert match.active == new
    assert "until 2026-12-01: new" in new.describe()


# ----------------------------------------------------------------- severity gate


def test_the_gate_blocks_failures_at_or_above_the_threshold_only() -> None:
    records = [
        record("a.critical", "failed", severity="critical"),
        record("a.high", "error", severity="high"),
        record("a.medium", "failed", severity="medium"),
        record("a.low", "failed", severity="low"),
        record("a.passing", "passed", severity="critical"),
        record("a.waived", "waived", severity="critical"),
    ]
    gate = apply_gate(records, "high")
    assert [r.check_id for r in gate.blocking] == ["a.critical", "a.high"]
    assert [r.check_id for r in gate.below] == ["a.medium", "a.low"]
    assert not gate.passed
    assert gate.summary() == (
        "severity gate 'high': 2 blocking failure(s), "
        "2 failure(s) below the gate (reported, not blocking)"
    )


def test_the_gate_passes_when_only_lower_severities_fail() -> None:
    gate = apply_gate([record("a.low", "failed", severity="low")], "medium")
    assert gate.passed
    assert [r.check_id for r in gate.below] == ["a.low"]


def test_the_default_gate_low_blocks_every_failure() -> None:
    assert not apply_gate([record("a.low", "failed", severity="low")], "low").passed
    assert apply_gate([record("a.ok")], "low").summary() == (
        "severity gate 'low': no failing checks"
    )


# ----------------------------------------------------------------- redaction


def test_redact_removes_pem_private_keys_but_keeps_certificates() -> None:
    cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    out = redact(f"before\n{FAKE_KEY_PEM}{cert}\nafter")
    assert KEY_BODY not in out
    assert "<redacted>" in out
    assert cert in out
    assert out.startswith("before\n")
    assert out.endswith("after")


def test_redact_removes_base64_encoded_keys_as_talosconfig_carries_them() -> None:
    b64_key = base64.b64encode(FAKE_KEY_PEM.encode()).decode()
    b64_cert = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n").decode()
    out = redact(f"ca: {b64_cert}\nblob {b64_key} end")
    assert b64_key not in out
    assert b64_cert in out


def test_redact_blanks_key_like_fields_and_yaml_lines() -> None:
    out = redact(
        {
            "Key": b"secret-bytes",
            "token": "abc.def",
            "nested": [{"password": "p", "name": "kubelet"}],
            "config": "machine:\n  token: xyz123\n  ca:\n    key: QUJD\n  type: worker\n",
        }
    )
    assert out["Key"] == "<redacted>"
    assert out["token"] == "<redacted>"
    assert out["nested"] == [{"password": "<redacted>", "name": "kubelet"}]
    assert "xyz123" not in out["config"]
    assert "QUJD" not in out["config"]
    assert "type: worker" in out["config"]


def test_redact_makes_values_json_ready() -> None:
    out = redact({"ports": {22, 9100}, "when": TODAY, "n": 3, "ok": True, "none": None})
    assert out == {"ports": [22, 9100], "when": "2026-06-01", "n": 3, "ok": True, "none": None}
    json.dumps(out)


# ----------------------------------------------------------------- results and reports


def test_results_json_carries_every_check_with_its_evidence_and_the_gate(tmp_path: Path) -> None:
    records = [
        record(
            "immutability.no-ssh",
            "failed",
            duration=0.1234,
            message="port 22 is open",
            evidence={"unexpected_ports": [22]},
        ),
        record("services.logs-readable", "skipped", severity="medium", message="no node"),
        record("cluster.members-consistent", "passed", node=None, severity="high"),
    ]
    written = write_reports(tmp_path / "out", records, run_info())
    assert sorted(written) == ["report.html", "report.md", "results.json"]
    results = json.loads(written["results.json"].read_text())
    assert results["format"] == "pytest-talos-conformance/1"
    assert results["summary"] == {
        "failed": 1,
        "error": 0,
        "waived": 0,
        "skipped": 1,
        "passed": 1,
        "total": 3,
        "not_applicable": 0,
        "needs_admin": 0,
    }
    assert results["gate"] == {"fail_under": "low", "passed": False, "blocking": 1, "below": 0}
    first = results["checks"][0]
    assert first == {
        "id": "immutability.no-ssh",
        "node": "cp-1",
        "area": "immutability",
        "outcome": "failed",
        "severity": "critical",
        "claim": "There is no shell on the node.",
        "duration": 0.123,
        "message": "port 22 is open",
        "evidence": {"unexpected_ports": [22]},
        "waiver": None,
        "test": "",
        "notes": [],
        "skip_kind": None,
    }
    assert results["checks"][2]["node"] is None
    assert results["run"]["targets"][0]["talos_version"] == "v1.13.9"
    assert results["run"]["duration"] == 60.0


def test_no_report_file_ever_contains_key_material(tmp_path: Path) -> None:
    b64_key = base64.b64encode(FAKE_KEY_PEM.encode()).decode()
    records = [
        record(
            "api.mtls-required",
            "failed",
            message=f"leaked {FAKE_KEY_PEM}",
            evidence={"talosconfig": f"key: {b64_key}\n", "key": "raw", "log": FAKE_KEY_PEM},
        ),
    ]
    run = run_info(settings={"talosconfig": "/tmp/tc", "key": "x"}, notes=[FAKE_KEY_PEM])
    written = write_reports(tmp_path, records, run)
    for path in written.values():
        text = path.read_text()
        assert KEY_BODY not in text, path.name
        assert b64_key not in text, path.name
        assert "PRIVATE KEY" not in text, path.name


def test_markdown_report_leads_with_the_verdict_and_shows_failure_evidence() -> None:
    waiver = Waiver("services.no-recent-restarts", "NTP flake", dt.date(2026, 7, 1))
    records = [
        record(
            "services.expected-running-healthy",
            "failed",
            node="worker-1",
            severity="high",
            message="kubelet is not healthy",
            evidence={"last_events": "Failed: unknown flag --foo\nRunning", "restarts": 4},
        ),
        record(
            "services.no-recent-restarts",
            "waived",
            severity="high",
            waiver=waiver,
            message="kubelet restarted 4 times",
        ),
        record(
            "vendor.platform",
            "skipped",
            severity="medium",
            message="no vendor profile given (--talos-profile)",
        ),
        record(
            "vendor.platform",
            "skipped",
            severity="medium",
            node="w-1",
            message="no vendor profile given (--talos-profile)",
        ),
        record("api.version-answers", "passed", severity="critical"),
    ]
    text = render_markdown(build_results(records, run_info()))
    lines = text.splitlines()
    assert lines[0] == "# Talos conformance report"
    assert lines[2].startswith("**Verdict: FAILED**")
    assert "| cp-1 | controlplane | v1.13.9 | container |" in text
    assert "### `services.expected-running-healthy` on worker-1 (high)" in text
    assert "  Failed: unknown flag --foo" in text
    assert "- **restarts**: 4" in text
    assert "Waived until 2026-07-01: NTP flake" in text
    assert (
        "| `vendor.platform` | cp-1, w-1 | SKIP | no vendor profile given (--talos-profile) |"
        in text
    )
    assert "| PASS | critical | `api.version-answers` | cp-1 |" in text
    # failures come first in the table, passes last
    assert text.index("| FAIL |") < text.index("| WAIVED |") < text.index("| PASS |")


def test_markdown_verdict_passes_when_failures_are_below_the_gate() -> None:
    records = [record("vendor.kernel-args", "failed", severity="low"), record()]
    text = render_markdown(build_results(records, run_info(threshold="high")))
    assert "**Verdict: PASSED** (severity gate: fail on `high` or worse; 0 blocking, 1 below" in (
        text
    )


def test_html_report_escapes_everything_it_shows() -> None:
    records = [
        record(
            "api.resources-readable",
            "failed",
            message="<script>alert(1)</script>",
            evidence={"<b>": "x & y"},
        )
    ]
    page = render_html(build_results(records, run_info()))
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;" in page
    assert "x &amp; y" in page
    assert '<div class="verdict FAILED">FAILED</div>' in page


def test_long_messages_and_evidence_are_clipped() -> None:
    records = [
        record(
            "services.logs-readable",
            "failed",
            message="m" * 20000,
            evidence={"log_tail": "l" * 10000},
        )
    ]
    check = build_results(records, run_info())["checks"][0]
    assert len(check["message"]) <= 8000
    assert check["message"].endswith("more characters)")
    assert len(check["evidence"]["log_tail"]) <= 4000


def test_an_unwritable_report_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot write the conformance report"):
        write_reports(blocker / "sub", [record()], run_info())


# ----------------------------------------------------------------- what was tested


EMULATED = {
    "kind": "emulated",
    "endpoints": ["127.0.0.1:50000"],
    "context": "emulator",
    "faults": ["ssh-open"],
    "variants": ["metal"],
    "time_scale": 20.0,
}


def test_every_report_says_what_was_tested_and_an_emulator_cannot_be_missed() -> None:
    run = run_info(
        tested=EMULATED,
        settings={"talos_allow": "mutating", "waivers": "w.yaml"},
        kit_version="9.9.9",
    )
    results = build_results([record(outcome="failed")], run)
    assert results["run"]["tested"]["kind"] == "emulated"
    assert results["run"]["kit"] == {"name": "pytest-talos", "version": "9.9.9"}
    md, page = render_markdown(results), render_html(results)
    for text in (md, page):
        assert "EMULATED TARGET" in text
        assert "ssh-open" in text
        assert "metal" in text
        assert "20.0x" in text
        assert "127.0.0.1:50000" in text
        assert "emulator" in text
        assert "v1.13.9" in text  # node versions
        assert "pytest-talos 9.9.9" in text
        assert "quick" in text
        assert "--talos-allow mutating" in text
        assert "w.yaml" in text
        assert "2026-06-01 10:00:00 UTC" in text
        assert "1 min 0 s" in text
    assert md.index("EMULATED TARGET") < md.index("Verdict")


def test_a_real_target_says_real_nodes_and_no_emulator_banner() -> None:
    run = run_info(tested={"kind": "real", "endpoints": ["10.0.0.2:50000"], "context": "prod"})
    results = build_results([record()], run)
    for text in (render_markdown(results), render_html(results)):
        assert "real nodes" in text
        assert "EMULATED" not in text
        assert "prod" in text


def test_html_is_a_document_summary_matrix_failures_first_passes_collapsed() -> None:
    nodes = [f"node-{i:02d}" for i in range(50)]
    records = [
        record(
            check=f"api.check-{j}",
            node=n,
            area="api",
            outcome="failed" if (j, n) == (3, "node-07") else "passed",
        )
        for j in range(5)
        for n in nodes
    ]
    records.append(
        record(
            check="cluster.etcd-healthy",
            node=None,
            outcome="skipped",
            message="needs os:admin",
            severity="high",
        )
    )
    long_line = "x" * 3000
    records[0] = record(
        check="api.check-0",
        node="node-00",
        outcome="failed",
        message=long_line,
        evidence={"observed": "line\n" * 3},
        notes=["images not verified"],
    )
    run = run_info(targets=[TargetInfo(n, "worker", "v1.13.9") for n in nodes])
    page = render_html(build_results(records, run))
    assert '<section class="summary">' in page
    assert page.count('class="cell c-') >= 251  # one cell per result (and the legend)
    assert page.count('<th class="node">') == 51  # 50 nodes and the cluster column
    assert page.index("<h2>Failures (2)") < page.index("<h2>Passed")
    assert "<h2>Passed</h2><details>" in page
    assert "<h2>Skipped</h2><details>" in page
    assert long_line in page  # never clipped in the HTML (JSON clips at 8000 characters)
    assert "white-space:pre-wrap" in page
    # Printing (to PDF) opens every collapsed part.
    print_css = page[page.index("@media print") :]
    assert "details::details-content{content-visibility:visible;display:block}" in print_css
    assert "Note: images not verified" in page
    assert 'href="#api.check-3@node-07"' in page
    assert 'id="api.check-3@node-07"' in page


def test_waived_failures_show_their_waiver_in_every_report() -> None:
    waiver = Waiver("api.mtls-required", "vendor ticket 42", dt.date(2026, 7, 1))
    results = build_results(
        [record(check="api.mtls-required", outcome="waived", waiver=waiver)], run_info()
    )
    for text in (render_markdown(results), render_html(results)):
        assert "vendor ticket 42" in text
        assert "2026-07-01" in text
    assert "<h2>Waived failures (1)</h2>" in render_html(results)
