"""Every --talos-* option: its ini key, environment fallback, precedence and usage errors.

These runs never connect: the inner test only prints the resolved settings, and
``--no-header`` keeps the report header (which would connect) out of the way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

Run = Callable[..., pytest.RunResult]

SHOW_SETTINGS = """
from pytest_talos.plugin import resolve_settings

def test_show(request):
    settings = resolve_settings(request.config)
    for name in ("talosconfig", "context", "endpoints", "nodes", "emulator", "faults",
                 "allow", "timeout"):
        setting = getattr(settings, name)
        print(f"SETTING {name}={setting.value!r} FROM {setting.source}")
    print(f"IGNORED {settings.ignored!r}")
"""


def settings_of(result: pytest.RunResult) -> dict[str, tuple[str, str]]:
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    found = re.findall(r"SETTING (\w+)=(.*) FROM (.*)$", result.stdout.str(), re.MULTILINE)
    return {name: (value, source) for name, value, source in found}


@dataclass(frozen=True)
class Case:
    name: str
    cli: tuple[str, ...]
    cli_value: str
    ini: str
    ini_value: str
    env: str
    env_value: str
    env_expected: str
    default: str


CASES = [
    Case(
        "timeout",
        ("--talos-timeout", "5"),
        "5.0",
        "talos_timeout = 6",
        "6.0",
        "TALOS_TIMEOUT",
        "7",
        "7.0",
        "10.0",
    ),
    Case(
        "context",
        ("--talos-context", "from-cli"),
        "'from-cli'",
        "talos_context = from-ini",
        "'from-ini'",
        "TALOS_CONTEXT",
        "from-env",
        "'from-env'",
        "None",
    ),
    Case(
        "endpoints",
        ("--talos-endpoint", "a:1", "--talos-endpoint", "b:2,c:3"),
        "('a:1', 'b:2', 'c:3')",
        "talos_endpoints = i1, i2",
        "('i1', 'i2')",
        "TALOS_ENDPOINTS",
        "e1,e2",
        "('e1', 'e2')",
        "()",
    ),
    Case(
        "nodes",
        ("--talos-nodes", "10.5.0.2", "--talos-nodes", "10.5.0.3"),
        "('10.5.0.2', '10.5.0.3')",
        "talos_nodes = 10.5.0.4",
        "('10.5.0.4',)",
        "TALOS_NODES",
        "10.5.0.5",
        "('10.5.0.5',)",
        "()",
    ),
    Case(
        "allow",
        ("--talos-allow", "disruptive"),
        "'disruptive'",
        "talos_allow = mutating",
        "'mutating'",
        "TALOS_ALLOW",
        "none",
        "'none'",
        "'none'",
    ),
    Case(
        "emulator",
        ("--talos-emulator=2:3",),
        "(2, 3)",
        "talos_emulator = 3:1",
        "(3, 1)",
        "TALOS_EMULATOR",
        "true",
        "(1, 1)",
        "None",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_cli_beats_ini_beats_env_beats_default(
    case: Case, run: Run, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    flag = case.cli[0].split("=")[0]
    ini_key = case.ini.split(" = ")[0]

    assert settings_of(run("-s", "--no-header"))[case.name] == (case.default, "default")

    monkeypatch.setenv(case.env, case.env_value)
    assert settings_of(run("-s", "--no-header"))[case.name] == (case.env_expected, f"${case.env}")

    pytester.makeini(f"[pytest]\n{case.ini}\n")
    assert settings_of(run("-s", "--no-header"))[case.name] == (case.ini_value, f"ini {ini_key}")

    assert settings_of(run("-s", "--no-header", *case.cli))[case.name] == (case.cli_value, flag)


def test_talosconfig_paths_resolve_against_their_origin(
    run: Run, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    monkeypatch.setenv("TALOSCONFIG", "/etc/from-env")
    assert settings_of(run("-s", "--no-header"))["talosconfig"] == (
        "'/etc/from-env'",
        "$TALOSCONFIG",
    )
    pytester.makeini("[pytest]\ntalosconfig = conf/from-ini\n")
    expected_ini = str(pytester.path / "conf" / "from-ini")
    assert settings_of(run("-s", "--no-header"))["talosconfig"] == (
        repr(expected_ini),
        "ini talosconfig",
    )
    (pytester.path / "sub").mkdir()
    monkeypatch.chdir(pytester.path / "sub")
    shown = settings_of(run(str(pytester.path), "-s", "--no-header", "--talosconfig", "tc"))
    assert shown["talosconfig"] == (repr(str(pytester.path / "sub" / "tc")), "--talosconfig")


def test_emulator_flag_alone_means_one_control_plane_and_one_worker(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    shown = settings_of(run("-s", "--no-header", "--talos-emulator"))
    assert shown["emulator"] == ("(1, 1)", "--talos-emulator")


@pytest.mark.parametrize("value", ["0", "false", "off", "no"])
def test_emulator_can_be_switched_off_from_the_environment(
    value: str, run: Run, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    monkeypatch.setenv("TALOS_EMULATOR", value)
    assert settings_of(run("-s", "--no-header"))["emulator"] == ("None", "$TALOS_EMULATOR")


def test_faults_collect_from_repeated_flags(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    shown = settings_of(
        run(
            "-s",
            "--no-header",
            "--talos-emulator",
            "--talos-emulator-fault",
            "ssh-open",
            "--talos-emulator-fault",
            "extra-port,shell-present",
        )
    )
    assert shown["faults"] == (
        "('ssh-open', 'extra-port', 'shell-present')",
        "--talos-emulator-fault",
    )


def test_environment_targets_are_ignored_with_the_emulator(
    run: Run, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    monkeypatch.setenv("TALOS_ENDPOINTS", "10.5.0.2")
    monkeypatch.setenv("TALOSCONFIG", "/somewhere/talosconfig")
    result = run("-s", "--no-header", "--talos-emulator")
    settings_of(result)
    result.stdout.fnmatch_lines(["IGNORED ('$TALOS_ENDPOINTS', '$TALOSCONFIG')"])


def test_help_lists_every_option_with_ini_and_environment(run: Run) -> None:
    result = run("--help")
    result.stdout.fnmatch_lines(["Talos Linux nodes (pytest-talos):"])
    for flag, ini, env in [
        ("--talosconfig", "talosconfig", "TALOSCONFIG"),
        ("--talos-context", "talos_context", "TALOS_CONTEXT"),
        ("--talos-endpoint", "talos_endpoints", "TALOS_ENDPOINTS"),
        ("--talos-nodes", "talos_nodes", "TALOS_NODES"),
        ("--talos-emulator", "talos_emulator", "TALOS_EMULATOR"),
        ("--talos-emulator-fault", "talos_emulator_faults", "TALOS_EMULATOR_FAULTS"),
        ("--talos-emulator-time-scale", "talos_emulator_time_scale", "TALOS_EMULATOR_TIME_SCALE"),
        ("--talos-emulator-latency", "talos_emulator_latency", "TALOS_EMULATOR_LATENCY"),
        ("--talos-allow", "talos_allow", "TALOS_ALLOW"),
        ("--talos-timeout", "talos_timeout", "TALOS_TIMEOUT"),
    ]:
        text = " ".join(result.stdout.str().split())
        assert re.search(rf"{re.escape(flag)}\b.*?\[ini {ini}; env \${env}\]", text), flag
        result.stdout.fnmatch_lines([f"  {ini} (*"])


# --------------------------------------------------------------------------- usage errors


def usage_error(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    lines = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(lines) == 1, result.stderr.str()
    return lines[0]


def test_emulator_and_endpoint_are_mutually_exclusive(run: Run) -> None:
    assert usage_error(run("--talos-emulator", "--talos-endpoint", "10.5.0.2")) == (
        "ERROR: --talos-emulator and --talos-endpoint are mutually exclusive: the emulated "
        "cluster brings its own endpoint; drop one of the two"
    )


def test_emulator_and_an_ini_talosconfig_are_mutually_exclusive(
    run: Run, pytester: pytest.Pytester
) -> None:
    pytester.makeini("[pytest]\ntalosconfig = ./talosconfig\n")
    assert usage_error(run("--talos-emulator")) == (
        "ERROR: --talos-emulator and ini talosconfig are mutually exclusive: the emulated "
        "cluster brings its own talosconfig; drop one of the two"
    )


def test_emulator_and_context_are_mutually_exclusive(run: Run) -> None:
    message = usage_error(run("--talos-emulator", "--talos-context", "prod"))
    assert message.startswith("ERROR: --talos-emulator and --talos-context are mutually")


def test_faults_need_the_emulator(run: Run) -> None:
    assert usage_error(run("--talos-emulator-fault", "ssh-open")) == (
        "ERROR: --talos-emulator-fault needs the emulated cluster: add --talos-emulator"
    )


def test_emulator_version_needs_the_emulator(run: Run) -> None:
    assert usage_error(run("--talos-emulator-version", "v1.14.x")) == (
        "ERROR: --talos-emulator-version needs the emulated cluster: add --talos-emulator"
    )


def test_unknown_emulator_version_names_the_known_releases(run: Run) -> None:
    assert usage_error(run("--talos-emulator", "--talos-emulator-version", "v1.15")) == (
        "ERROR: --talos-emulator-version: unknown Talos release 'v1.15': the emulator plays "
        "v1.12.x, v1.13.x, v1.14.x (or a full tag of one, e.g. v1.13.9)"
    )


def test_time_scale_needs_the_emulator(run: Run) -> None:
    assert usage_error(run("--talos-emulator-time-scale", "20")) == (
        "ERROR: --talos-emulator-time-scale needs the emulated cluster: add --talos-emulator"
    )


@pytest.mark.parametrize("value", ["fast", "0", "-2"])
def test_time_scale_must_be_a_positive_factor(value: str, run: Run) -> None:
    assert usage_error(run("--talos-emulator", f"--talos-emulator-time-scale={value}")) == (
        f"ERROR: --talos-emulator-time-scale: {value!r} is not a positive factor; e.g. "
        "--talos-emulator-time-scale 20"
    )


def test_time_scale_reaches_the_emulated_cluster(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_talos.plugin import SESSION_KEY

        def test_scale(talos_cluster, request):
            print("SCALE", request.config.stash[SESSION_KEY].emulator.clock.time_scale)
        """
    )
    result = run("-s", "--talos-emulator", "--talos-emulator-time-scale=20")
    result.stdout.fnmatch_lines(["*SCALE 20.0*"])
    result.stdout.fnmatch_lines(["*time scale 20x [--talos-emulator-time-scale]*"])


def test_latency_needs_the_emulator(run: Run) -> None:
    assert usage_error(run("--talos-emulator-latency", "20ms")) == (
        "ERROR: --talos-emulator-latency needs the emulated cluster: add --talos-emulator"
    )


@pytest.mark.parametrize("value", ["slow", "-5ms", "9s"])
def test_latency_must_be_a_round_trip_time(value: str, run: Run) -> None:
    assert usage_error(run("--talos-emulator", f"--talos-emulator-latency={value}")) == (
        f"ERROR: --talos-emulator-latency: {value!r} is not a round-trip time between 0 and "
        "5 s; write it as milliseconds or seconds, e.g. 20ms or 0.02s"
    )


def test_latency_reaches_the_emulated_cluster(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_talos.plugin import SESSION_KEY

        def test_latency(talos_cluster, request):
            print("RTT", request.config.stash[SESSION_KEY].emulator.latency.rtt)
        """
    )
    result = run("-s", "--talos-emulator", "--talos-emulator-latency=25ms")
    result.stdout.fnmatch_lines(["*RTT 0.025*"])
    result.stdout.fnmatch_lines(["*latency 25ms [--talos-emulator-latency]*"])


def test_unknown_fault_lists_the_known_ones(run: Run) -> None:
    message = usage_error(run("--talos-emulator", "--talos-emulator-fault", "no-such-fault"))
    assert message.startswith(
        "ERROR: --talos-emulator-fault: unknown fault profile 'no-such-fault'"
    )
    assert " Choose from " in message
    assert "ssh-open" in message
    assert "kubelet-crashloop" in message


@pytest.mark.parametrize("value", ["abc", "0:1", "1:x", "2"])
def test_emulator_size_must_be_cp_colon_w(value: str, run: Run) -> None:
    message = usage_error(run(f"--talos-emulator={value}"))
    assert message == (
        f"ERROR: --talos-emulator: {value!r} is not CP:W with at least one control plane "
        "(e.g. 1:1 or 3:2); write --talos-emulator=CP:W, or put test paths before "
        "--talos-emulator"
    )


def test_a_test_path_after_the_emulator_flag_gets_the_fix(run: Run) -> None:
    message = usage_error(run("--talos-emulator", "tests"))
    assert "'tests' is not CP:W" in message
    assert "put test paths before --talos-emulator" in message


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_timeout_must_be_positive(value: str, run: Run) -> None:
    assert usage_error(run(f"--talos-timeout={value}")) == (
        f"ERROR: --talos-timeout: {value!r} is not a positive number of seconds; "
        "e.g. --talos-timeout 10"
    )


def test_bad_allow_from_the_environment(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALOS_ALLOW", "everything")
    assert usage_error(run()) == (
        "ERROR: $TALOS_ALLOW: 'everything' is not a change level; use one of none, mutating, "
        "disruptive"
    )


def test_bad_allow_on_the_command_line(run: Run) -> None:
    result = run("--talos-allow", "everything")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--talos-allow: invalid choice: 'everything'*"])


def test_bad_timeout_from_ini(run: Run, pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntalos_timeout = -1\n")
    assert usage_error(run()).startswith("ERROR: ini talos_timeout: '-1' is not a positive")


def test_pytest_still_runs_plain_tests_without_any_talos_setting(
    run: Run, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = run("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    assert not (tmp_path / "home" / ".talos").exists()
