"""``report.html``: one self-contained document (no scripts) that prints cleanly to PDF."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_talos.reporting.facts import (
    build_facts,
    human_time,
    outcome_label,
    run_by_facts,
    tested_facts,
    verdict_of,
)
from pytest_talos.reporting.severity import OUTCOMES, SEVERITIES

__all__ = ["render_html"]


_HTML_STYLE = """
:root{--pass:#1b7f3b;--fail:#c0162c;--waive:#a86400;--skip:#7a7f87;--err:#7b1fa2;
--line:#d5d9de;--soft:#f4f6f8}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d232a;
margin:0 auto;padding:1.5em 2em;max-width:80em}
h1{font-size:1.6em;margin:.2em 0 .4em}h2{font-size:1.25em;margin:1.6em 0 .5em;
border-bottom:2px solid var(--line);padding-bottom:.2em}h3{font-size:1.05em;margin:0 0 .3em}
code{font:13px ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
pre{font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace;background:var(--soft);
padding:.6em .8em;margin:.3em 0;white-space:pre-wrap;overflow-wrap:anywhere;
border-radius:4px}
table{border-collapse:collapse}td,th{border:1px solid var(--line);padding:.25em .55em;
text-align:left;vertical-align:top}th{background:var(--soft)}
.emulated{border:3px solid #d97706;background:#fff4e0;padding:.7em 1em;margin:.6em 0 1em;
font-size:1.05em;border-radius:6px}.emulated strong{color:#9a4a00}
.summary{display:flex;flex-wrap:wrap;gap:1.2em;align-items:flex-start;border:1px solid
var(--line);border-radius:8px;padding:1em;margin-bottom:1em}
.verdict{font-size:1.5em;font-weight:700;padding:.35em .8em;border-radius:6px;color:#fff}
.verdict.PASSED{background:var(--pass)}.verdict.FAILED{background:var(--fail)}
.verdict.INCOMPLETE{background:var(--waive)}.verdict.ERROR{background:var(--err)}
.verdict.STOPPED,.verdict.NOT-FINISHED{background:#3b4552}.verdict.UNREACHABLE{background:var(--err)}
.reasons{margin:.4em 0 0;padding-left:1.2em}
.stopped{border:3px solid #3b4552;background:#eef1f4;padding:.7em 1em;margin:.6em 0 1em;
border-radius:6px}
.signoff td{height:2.2em;min-width:22em}.signoff th{width:14em}
.summary table td,.summary table th{text-align:right}.summary table td:first-child,
.summary table th:first-child{text-align:left}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1.2em;margin:0}
.facts dt{font-weight:600}.facts dd{margin:0;overflow-wrap:anywhere}
.o-passed{color:var(--pass)}.o-failed{color:var(--fail);font-weight:700}
.o-error{color:var(--err);font-weight:700}.o-waived{color:var(--waive)}
.o-skipped{color:var(--skip)}
.matrix{font-size:12px}.matrix td,.matrix th{padding:0;border:none;background:none}
.matrix th.node{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;
padding:.3em 0;font-weight:500;background:none;max-height:14em}
.matrix th.check{text-align:right;padding:0 .5em;font-weight:400;white-space:nowrap;
background:none}
.cell{display:block;width:15px;height:15px;margin:1px;border-radius:2px;
-webkit-print-color-adjust:exact;print-color-adjust:exact}
.c-passed{background:var(--pass)}.c-failed{background:var(--fail)}
.c-error{background:var(--err)}.c-waived{background:var(--waive)}
.c-skipped{background:#c9ced4}.c-none{background:none}
.c-na{background:repeating-linear-gradient(45deg,#e3e6ea 0 3px,#fff 3px 6px);
border:1px solid #c9ced4}.c-admin{background:#c9ced4;border:2px solid #56606b}
.legend span{display:inline-flex;align-items:center;gap:.3em;margin-right:1em}
.card{border:1px solid var(--line);border-left:6px solid var(--fail);border-radius:4px;
padding:.6em .9em;margin:.7em 0;break-inside:avoid}
.card.waived{border-left-color:var(--waive)}.card.error{border-left-color:var(--err)}
.card .meta{color:#4a525c;font-size:.92em;margin-bottom:.3em}
.card dl{display:grid;grid-template-columns:minmax(8em,max-content) 1fr;gap:.1em .8em;
margin:.3em 0}.card dt{font-weight:600;padding-top:.35em}.card dd{margin:0;min-width:0}
.card p{margin:.2em 0}
.sev{display:inline-block;padding:0 .45em;border-radius:3px;font-size:.85em;
font-weight:600;color:#fff;background:#56606b}.sev.critical{background:#7f1020}
.sev.high{background:#c0162c}.sev.medium{background:#c26a00}.sev.low{background:#56606b}
.note{background:#fff8db;border:1px solid #e6d28a;padding:.4em .7em;border-radius:4px;
margin:.4em 0}
details{margin:.5em 0}summary{cursor:pointer;font-weight:600}
@media print{
body{max-width:none;padding:0;font-size:11pt}
details::details-content{content-visibility:visible;display:block}
details:not([open])>summary~*{display:block}
details>summary{list-style:none}
.card,.summary,.emulated,tr{break-inside:avoid}
h2{break-after:avoid}a{color:inherit;text-decoration:none}
.noprint{display:none}
@page{margin:16mm 14mm;
@top-left{content:"Talos conformance report";font:9pt system-ui,sans-serif;color:#56606b}
@bottom-right{content:"Page " counter(page) " of " counter(pages);font:9pt system-ui,
sans-serif;color:#56606b}}
.signoff{break-inside:avoid}
}
"""


def _h(text: Any) -> str:
    return html.escape(str(text if text is not None else ""))


def _html_evidence(evidence: Mapping[str, Any]) -> str:
    items = []
    for key, value in evidence.items():
        shown = value if isinstance(value, str) else json.dumps(value, indent=1)
        items.append(f"<dt>{_h(key)}</dt><dd><pre>{_h(shown)}</pre></dd>")
    return f"<dl>{''.join(items)}</dl>" if items else ""


def _html_notes(c: Mapping[str, Any]) -> str:
    return "".join(f'<div class="note">Note: {_h(n)}</div>' for n in c.get("notes") or ())


def _cell_class(c: Mapping[str, Any]) -> str:
    kind = c.get("skip_kind")
    if c["outcome"] == "skipped" and kind == "not-applicable":
        return "c-na"
    if c["outcome"] == "skipped" and kind == "needs-admin":
        return "c-admin"
    return f"c-{c['outcome']}"


def _html_card(c: Mapping[str, Any]) -> str:
    where = _h(c["node"] or "the cluster")
    body = f"<p>{_h(c['claim'])}</p>"
    if c["waiver"]:
        w = c["waiver"]
        body += (
            f'<div class="note"><strong>Waived</strong> until {_h(w["expires"])}: '
            f"{_h(w['reason'])}</div>"
        )
    if c["message"]:
        body += f"<pre>{_h(c['message'])}</pre>"
    body += _html_notes(c) + _html_evidence(c["evidence"])
    return (
        f'<div class="card {_h(c["outcome"])}" id="{_h(_anchor(c))}">'
        f"<h3><code>{_h(c['id'])}</code> on {where}</h3>"
        f'<div class="meta"><span class="o-{_h(c["outcome"])}">'
        f"{_h(outcome_label(c))}</span> · "
        f'<span class="sev {_h(c["severity"])}">{_h(c["severity"])}</span> · '
        f"{_h(c['area'])} · {float(c['duration']):.1f} s</div>{body}</div>"
    )


_OPEN_PER_CHECK = 3  # failure cards shown open per check; the rest are collapsed


def _html_failures(failures: Sequence[Mapping[str, Any]]) -> str:
    """Every failure with its evidence, by check; a check failing on many nodes shows its
    first cards and folds the others (printing opens them)."""
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for c in failures:
        by_check.setdefault(c["id"], []).append(c)
    out = []
    for cards in by_check.values():
        cards.sort(key=lambda c: _natural(str(c["node"] or "")))
        out += [_html_card(c) for c in cards[:_OPEN_PER_CHECK]]
        rest = cards[_OPEN_PER_CHECK:]
        if rest:
            nodes = ", ".join(str(c["node"] or "cluster") for c in rest)
            out.append(
                f"<details><summary>{len(rest)} more node(s) failing "
                f"<code>{_h(cards[0]['id'])}</code>: {_h(nodes)}</summary>"
                + "".join(_html_card(c) for c in rest)
                + "</details>"
            )
    return "".join(out)


def _anchor(c: Mapping[str, Any]) -> str:
    return f"{c['id']}@{c['node'] or 'cluster'}"


def _count_table(
    checks: Sequence[Mapping[str, Any]], key: str, title: str, order: Sequence[str]
) -> str:
    groups: dict[str, dict[str, int]] = {}
    for c in checks:
        groups.setdefault(str(c[key]), dict.fromkeys(OUTCOMES, 0))[c["outcome"]] += 1
    names = [n for n in order if n in groups] + sorted(set(groups) - set(order))
    shown = [o for o in OUTCOMES if any(groups[n][o] for n in names)]
    head = "".join(f'<th class="o-{o}">{_h(o)}</th>' for o in shown)
    rows = "".join(
        f"<tr><td>{_h(n)}</td>"
        + "".join(f'<td class="o-{o}">{groups[n][o] or ""}</td>' for o in shown)
        + "</tr>"
        for n in names
    )
    return f"<table><tr><th>{_h(title)}</th>{head}</tr>{rows}</table>"


def _html_summary(results: Mapping[str, Any]) -> str:
    gate, summary, checks = results["gate"], results["summary"], results["checks"]
    verdict = verdict_of(results)
    counts = ", ".join(f"{summary[o]} {o}" for o in OUTCOMES if summary[o])
    for key, label in (("not_applicable", "not applicable"), ("needs_admin", "need os:admin")):
        if summary.get(key):
            counts += f" ({summary[key]} {label})"
    reasons = "".join(f"<li>{_h(r)}</li>" for r in results.get("verdict_reasons") or ())
    code = results.get("exit_code")
    exit_text = "exit code unknown (the run did not finish)" if code is None else f"exit {code}"
    return (
        '<section class="summary"><div>'
        f'<div class="verdict {_h(verdict.replace(" ", "-"))}">{_h(verdict)}</div>'
        f'<ul class="reasons">{reasons}</ul>'
        f"<p>{_h(exit_text)}<br>{summary['total']} results: {_h(counts)}<br>severity gate: fail on "
        f"<code>{_h(gate['fail_under'])}</code> or worse<br>{gate['blocking']} blocking, "
        f"{gate['below']} below the gate</p></div>"
        f"{_count_table(checks, 'severity', 'Severity', SEVERITIES)}"
        f"{_count_table(checks, 'area', 'Area', ())}</section>"
    )


def _html_tested(run: Mapping[str, Any]) -> tuple[str, str]:
    facts = tested_facts(run)
    banner = ""
    tested = run.get("tested") or {}
    if tested.get("kind") == "emulated":
        faults = ", ".join(tested.get("faults") or ()) or "none"
        variants = ", ".join(tested.get("variants") or ()) or "none"
        banner = (
            '<div class="emulated"><strong>EMULATED TARGET</strong>: these results are of '
            "the pytest-talos emulator, not of real Talos nodes. Faults: "
            f"<strong>{_h(faults)}</strong>; variants: <strong>{_h(variants)}</strong>; "
            f"clock <strong>{_h(tested.get('time_scale', 1))}x</strong> real time.</div>"
        )
    rows = "".join(f"<dt>{_h(k)}</dt><dd>{_h(v)}</dd>" for k, v in [*facts, *build_facts(run)])
    notes = "".join(f'<div class="note">{_h(n)}</div>' for n in run.get("notes") or ())
    return banner, f'<h2>What was tested</h2><dl class="facts">{rows}</dl>{notes}'


def _html_nodes(run: Mapping[str, Any]) -> str:
    targets = run["targets"]
    if not targets:
        return ""
    rows = "".join(
        f"<tr><td>{_h(t['name'])}</td><td>{_h(t['role'])}</td><td>{_h(t['talos_version'])}"
        f"</td><td>{_h(t['platform'])}</td><td>{_h(t.get('address', ''))}</td></tr>"
        for t in targets
    )
    body = (
        "<table><tr><th>Node</th><th>Role</th><th>Talos</th><th>Platform</th>"
        f"<th>Address</th></tr>{rows}</table>"
    )
    if len(targets) > 12:
        return f"<h2>Nodes</h2><details><summary>{len(targets)} nodes</summary>{body}</details>"
    return f"<h2>Nodes</h2>{body}"


def _html_matrix(results: Mapping[str, Any]) -> str:
    """Checks down, nodes across (cluster-wide checks in their own column): one cell each."""
    checks = results["checks"]
    if not checks:
        return ""
    nodes = [t["name"] for t in results["run"]["targets"]]
    for c in checks:
        if c["node"] and c["node"] not in nodes:
            nodes.append(c["node"])
    nodes.sort(key=_natural)  # worker-2 before worker-10
    columns = (["cluster"] if any(c["node"] is None for c in checks) else []) + nodes
    cells: dict[tuple[str, str], Mapping[str, Any]] = {}
    order: list[str] = []
    for c in sorted(checks, key=lambda c: str(c["id"])):
        if c["id"] not in order:
            order.append(c["id"])
        cells[(c["id"], c["node"] or "cluster")] = c
    head = "".join(f'<th class="node">{_h(n)}</th>' for n in columns)
    rows = []
    for check_id in order:
        row = []
        for column in columns:
            c = cells.get((check_id, column))
            if c is None:
                row.append('<td><span class="cell c-none"></span></td>')
                continue
            title = f"{check_id} on {column}: {c['outcome']}"
            link = f"#{_anchor(c)}" if c["outcome"] in ("failed", "error", "waived") else ""
            cell = f'<span class="cell {_cell_class(c)}" title="{_h(title)}"></span>'
            row.append(f'<td><a href="{_h(link)}">{cell}</a></td>' if link else f"<td>{cell}</td>")
        rows.append(f'<tr><th class="check"><code>{_h(check_id)}</code></th>{"".join(row)}</tr>')
    legend = "".join(f'<span><span class="cell c-{o}"></span>{_h(o)}</span>' for o in OUTCOMES)
    legend += '<span><span class="cell c-na"></span>not applicable</span>'
    legend += '<span><span class="cell c-admin"></span>not run: needs os:admin</span>'
    return (
        f'<h2>Results by node</h2><p class="legend">{legend}</p>'
        f'<table class="matrix"><tr><th></th>{head}</tr>{"".join(rows)}</table>'
    )


def _natural(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _html_grouped(checks: Sequence[Mapping[str, Any]], outcome: str, title: str) -> str:
    """Passes or skips, one line per check (nodes grouped), collapsed."""
    grouped: dict[tuple[str, str], list[str]] = {}
    claims: dict[str, str] = {}
    for c in checks:
        if c["outcome"] == outcome:
            key = (c["id"], c["message"] if outcome == "skipped" else "")
            grouped.setdefault(key, []).append(c["node"] or "cluster")
            claims[c["id"]] = c["claim"]
    if not grouped:
        return ""
    total = sum(len(v) for v in grouped.values())
    extra = "<th>As</th><th>Reason</th>" if outcome == "skipped" else ""
    labels = {(c["id"], c["message"]): outcome_label(c) for c in checks}
    rows = "".join(
        f"<tr><td><code>{_h(cid)}</code></td><td>{_h(claims[cid])}</td>"
        f"<td>{_h(', '.join(nodes))}</td>"
        + (
            f"<td>{_h(labels.get((cid, reason), 'SKIP'))}</td><td>{_h(reason)}</td>"
            if outcome == "skipped"
            else ""
        )
        + "</tr>"
        for (cid, reason), nodes in grouped.items()
    )
    return (
        f"<h2>{_h(title)}</h2><details><summary>{total} result(s) of {len(grouped)} "
        f"check(s)</summary><table><tr><th>Check</th><th>Claim</th><th>Nodes</th>{extra}"
        f"</tr>{rows}</table></details>"
    )


def _html_stopped(run: Mapping[str, Any]) -> str:
    stopped = run.get("stopped")
    if not stopped:
        return ""
    if stopped.get("status") == "in progress":
        return (
            '<div class="stopped"><strong>NOT FINISHED</strong>: this run started at '
            f"{_h(stopped.get('at'))} and never completed its report: the process was killed "
            "(SIGKILL, out of memory) or is still running. Nothing here is a result.</div>"
        )
    not_run = stopped.get("not_run") or []
    names = ", ".join(f"{t['id']}{' on ' + t['node'] if t.get('node') else ''}" for t in not_run)
    listed = (
        f"<details><summary>{len(not_run)} test(s) not run</summary><p>{_h(names)}</p></details>"
        if not_run
        else ""
    )
    return (
        f'<div class="stopped"><strong>STOPPED</strong> at {_h(stopped.get("at"))}: '
        f"{_h(stopped.get('why'))}; the process exited {_h(stopped.get('exit_code'))}. "
        "The results below are of the tests that ran before it stopped.</div>" + listed
    )


def _html_run_by(run: Mapping[str, Any]) -> str:
    facts = run_by_facts(run)
    if not facts:
        return ""
    rows = "".join(f"<dt>{_h(k)}</dt><dd>{_h(v)}</dd>" for k, v in facts)
    return f'<h2>Run by</h2><dl class="facts">{rows}</dl>'


_SIGN_OFF = ("Reviewed by", "Role", "Date", "Signature", "Decision (accept / reject)")


def _html_sign_off(results: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{_h(label)}</th><td></td></tr>" for label in _SIGN_OFF)
    run = results["run"]
    return (
        '<h2>Sign-off</h2><section class="signoff"><p>Verdict '
        f"<strong>{_h(verdict_of(results))}</strong> of the run started "
        f"{_h(human_time(run['started']))}.</p><table>{rows}</table></section>"
    )


def _running_header(results: Mapping[str, Any]) -> str:
    """The printed pages' right-hand header: this run's verdict and start (CSS text)."""
    text = f"Verdict {verdict_of(results)} · {human_time(results['run']['started'])}"
    safe = re.sub(r"[^A-Za-z0-9 :.\-·]", "", text)
    return (
        "@media print{@page{@top-right{content:"
        f'"{safe}";font:9pt system-ui,sans-serif;color:#56606b}}}}}}'
    )


def render_html(results: Mapping[str, Any]) -> str:
    """The report as one self-contained HTML document (no scripts, prints cleanly to PDF):
    what was tested, a summary, a check x node matrix, failures with their evidence, waived
    failures, then passes and skips collapsed."""
    run, checks = results["run"], results["checks"]
    banner, tested = _html_tested(run)
    failures = [c for c in checks if c["outcome"] in ("failed", "error")]
    waived = [c for c in checks if c["outcome"] == "waived"]
    noted = [
        c for c in checks if c.get("notes") and c["outcome"] not in ("failed", "error", "waived")
    ]
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>Talos conformance report — {_h(verdict_of(results))}</title>"
        f"<style>{_HTML_STYLE}{_running_header(results)}</style></head><body>",
        f"<h1>Talos conformance report</h1>{banner}{_html_stopped(run)}"
        f"{_html_summary(results)}{tested}{_html_run_by(run)}",
        _html_matrix(results),
        f"<h2>Failures ({len(failures)})</h2>" + (_html_failures(failures) or "<p>None.</p>"),
    ]
    if waived:
        parts.append(
            f"<h2>Waived failures ({len(waived)})</h2>" + "".join(_html_card(c) for c in waived)
        )
    if noted:
        parts.append(
            "<h2>Notes from checks</h2>"
            + "".join(
                f"<p><code>{_h(c['id'])}</code> on {_h(c['node'] or 'the cluster')}:</p>"
                + _html_notes(c)
                for c in noted
            )
        )
    parts += [
        _html_nodes(run),
        _html_grouped(checks, "passed", "Passed"),
        _html_grouped(checks, "skipped", "Skipped"),
        _html_sign_off(results),
        f'<p class="meta">Generated by pytest-talos '
        f"{_h((run.get('kit') or {}).get('version', ''))}.</p></body></html>\n",
    ]
    return "".join(parts)
