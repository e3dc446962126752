"""The suite's options from ini and the environment as well: command line > ini > env >
default, the source named in the report header and in every usage error, lists comma-separated,
paths from ini relative to the rootdir. No target is needed: the settings are read (and bad
ones refused) before any node is asked anything."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.suite_runner import SuiteRun, run_suite

USAGE_ERROR = 4
NO_SHELL = "immutability.no-shell-or-ssh"
PORTS = "immutability.only-expected-ports"
HEADER = ("--talos-list-checks", "-v")  # -q -v: the report header is shown


def run(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, ini: str | None = None
) -> SuiteRun:
    extra: list[str] = []
    if ini is not None:
        (tmp_path / "sub").mkdir(exist_ok=True)
        path = tmp_path / "sub" / "pytest.ini"
        path.write_text("[pytest]\n" + ini)
        extra = ["-c", str(path), "--rootdir", str(path.parent)]
    return run_suite([*extra, *args], tmp_path / "report", env=env, timeout=120)


def test_command_line_beats_ini_beats_environment_and_the_header_names_the_source(
    tmp_path: Path,
) -> None:
    env = {"TALOS_FAIL_UNDER": "critical", "TALOS_CHECK": f"{NO_SHELL}, {PORTS}"}
    ini = "talos_fail_under = medium\n"
    from_env = run(tmp_path, *HEADER, env=env)
    assert from_env.returncode == 0, from_env.describe()
    assert "conformance: fail under critical [$TALOS_FAIL_UNDER]" in from_env.output
    assert f"conformance: only the checks {NO_SHELL}, {PORTS} [$TALOS_CHECK]" in from_env.output
    from_ini = run(tmp_path, *HEADER, env=env, ini=ini)
    assert "conformance: fail under medium [ini talos_fail_under]" in from_ini.output, (
        from_ini.describe()
    )
    from_cli = run(tmp_path, *HEADER, "--talos-fail-under", "high", env=env, ini=ini)
    assert "conformance: fail under high [--talos-fail-under]" in from_cli.output, (
        from_cli.describe()
    )


def test_a_bad_value_from_the_environment_or_ini_names_its_source(tmp_path: Path) -> None:
    for env, ini, message in (
        (
            {"TALOS_FAIL_UNDER": "hgh"},
            None,
            "$TALOS_FAIL_UNDER: 'hgh' is not one of critical, high, medium, low",
        ),
        (
            {"TALOS_OBSERVE": "10"},
            "talos_observe = soon\n",
            "ini talos_observe: 'soon' is not a positive number of seconds",
        ),
        (
            {"TALOS_RESTART_WINDOW": "-1"},
            None,
            "$TALOS_RESTART_WINDOW: '-1' is not a positive number of seconds",
        ),
        (
            {"TALOS_SUITE": "quik"},
            None,
            "$TALOS_SUITE: 'quik' is not one of full, post-upgrade, quick, vendor-image",
        ),
        ({"TALOS_SNAPSHOT": "save"}, None, "$TALOS_SNAPSHOT: 'save' is not MODE PATH"),
        ({}, "talos_snapshot = keep snap.json\n", "ini talos_snapshot: 'keep' is not a mode"),
        ({"TALOS_LEAVE_OUT": "vendor, nope"}, None, "$TALOS_LEAVE_OUT: 'nope' is not one of"),
        ({"TALOS_SHARD": "5/4"}, None, "$TALOS_SHARD: '5/4' is not a shard: I must be from 1"),
        ({}, "talos_shard = half\n", "ini talos_shard: 'half' is not I/N. Give the shard"),
        ({"TALOS_DOCKER": "maybe"}, None, "$TALOS_DOCKER: 'maybe' is not true or false"),
        (
            {},
            "talos_check = immutability.no-shel\n",
            "ini talos_check immutability.no-shel: there is no such check; did you mean",
        ),
    ):
        result = run(tmp_path, "--talos-list-checks", env=env, ini=ini)
        assert result.returncode == USAGE_ERROR, result.describe()
        assert f"ERROR: {message}" in result.output, result.describe()


def test_a_list_from_the_environment_and_the_suite_from_it_too(tmp_path: Path) -> None:
    env = {
        "TALOS_SUITE": "post-upgrade",
        "TALOS_LEAVE_OUT": "upgrade-version, upgrade-kubernetes-version",
    }
    result = run(tmp_path, env=env)
    assert result.returncode == USAGE_ERROR, result.describe()
    # Both parts the environment left out are left out: only the snapshot is still missing.
    assert "$TALOS_SUITE post-upgrade needs --talos-snapshot compare PATH:" in result.output, (
        result.describe()
    )
    assert "--talos-leave-out upgrade-snapshot\n" in result.output, result.describe()


def test_paths_from_ini_are_relative_to_the_rootdir_from_env_to_the_invocation_directory(
    tmp_path: Path,
) -> None:
    from_env = run(tmp_path, env={"TALOS_SNAPSHOT": "compare snap.json"})
    assert from_env.returncode == USAGE_ERROR, from_env.describe()
    assert f"--talos-snapshot compare {tmp_path / 'snap.json'}: no such file" in from_env.output
    from_ini = run(
        tmp_path,
        env={"TALOS_SNAPSHOT": "compare other.json"},
        ini="talos_snapshot = compare snap.json\n",
    )
    assert (
        f"--talos-snapshot compare {tmp_path / 'sub' / 'snap.json'}: no such file"
        in from_ini.output
    ), from_ini.describe()


def test_the_shard_and_docker_from_the_environment_or_ini(tmp_path: Path) -> None:
    env = {"TALOS_SHARD": "2/3", "TALOS_DOCKER": "no"}
    from_env = run(tmp_path, *HEADER, env=env)
    assert from_env.returncode == 0, from_env.describe()
    assert "conformance: shard 2/3 [$TALOS_SHARD]: the nodes of this shard" in from_env.output
    from_ini = run(tmp_path, *HEADER, env=env, ini="talos_shard = 1/3\n")
    assert "conformance: shard 1/3 [ini talos_shard]" in from_ini.output, from_ini.describe()
