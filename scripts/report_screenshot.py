"""Render the conformance report of an emulated run in headless Chromium and save a PNG.

    python scripts/report_screenshot.py                       # 2 nodes, docs/img/report.png
    python scripts/report_screenshot.py --emulator 3:27 --fault ssh-open --out /tmp/r30.png
    python scripts/report_screenshot.py --html /tmp/rep/report.html --out /tmp/r.png

It runs the conformance suite against the built-in emulator (``--talos-emulator=CP:W``, with
the faults and variants given, so the report has failures to show), writes the report into a
temporary directory (or ``--report-dir``) and takes a screenshot of ``report.html`` with
Debian's ``chromium`` (``apt-get install chromium``). With ``--html`` it only takes the
screenshot of an existing report. Exits 2 when no Chromium is installed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """The first headless-capable Chromium on PATH, or None."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def run_suite(
    report_dir: Path,
    emulator: str,
    faults: list[str],
    variants: list[str],
    suite: str,
    timeout: float,
) -> int:
    """The conformance suite against the emulator, writing its report into report_dir."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "conformance"),
        f"--talos-emulator={emulator}",
        "--talos-emulator-time-scale",
        "20",
        "--talos-restart-window",
        "100000",
        "--talos-observe",
        "40",
        "--talos-report",
        str(report_dir),
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
        "-rN",
    ]
    if suite:
        command += ["--talos-suite", suite]
    for fault in faults:
        command += ["--talos-emulator-fault", fault]
    for variant in variants:
        command += ["--talos-emulator-variant", variant]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if not (report_dir / "report.html").exists():
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"the suite wrote no report (exit {done.returncode})")
    return done.returncode


def screenshot(
    browser: str, html: Path, out: Path, width: int, height: int, timeout: float = 120.0
) -> Path:
    """Chromium's headless screenshot of one page (``--screenshot``), at width x height."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="report-shot-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={out}",
            f"--window-size={width},{height}",
            html.resolve().as_uri(),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if not out.exists() or out.stat().st_size == 0:
        raise SystemExit(
            f"chromium wrote no screenshot (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--emulator",
        default="1:1",
        metavar="CP:W",
        help="emulated cluster size (default 1:1; 3:27 gives 30 nodes)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="NAME",
        help="emulator fault (repeatable; default ssh-open, so there is a failure to show)",
    )
    parser.add_argument("--variant", action="append", default=[], metavar="NAME")
    parser.add_argument(
        "--suite", default="quick", help="suite profile (default quick; '' for every check)"
    )
    parser.add_argument(
        "--html",
        type=Path,
        default=None,
        help="screenshot this report.html instead of running the suite",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=None,
        help="keep the report here (default: a temporary directory)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "report.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2000)
    parser.add_argument(
        "--timeout", type=float, default=540.0, help="seconds the suite may take (default 540)"
    )
    args = parser.parse_args(argv)
    browser = find_browser()
    if browser is None:
        sys.stderr.write(
            "no Chromium found (tried " + ", ".join(BROWSERS) + "); install it "
            "with `apt-get install chromium`\n"
        )
        return 2
    if args.html is not None:
        html = args.html
    else:
        report_dir = args.report_dir or Path(tempfile.mkdtemp(prefix="talos-report-"))
        faults = ["ssh-open"] if args.fault is None else args.fault
        code = run_suite(report_dir, args.emulator, faults, args.variant, args.suite, args.timeout)
        html = report_dir / "report.html"
        print(f"suite exit {code}; report {html}")
    out = screenshot(browser, html, args.out, args.width, args.height)
    print(f"screenshot {out} ({out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
