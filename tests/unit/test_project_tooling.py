"""The project's tooling agrees with itself: CI runs the tox envs the README names, every tool
is pinned once (pyproject's dependency groups), the docs site lists every page and public
module, and the license is the one pyproject declares."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _tox_envs() -> dict[str, configparser.SectionProxy]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    envs = {name.removeprefix("testenv:"): tox[name] for name in tox if name.startswith("testenv:")}
    envs["py"] = tox["testenv"]
    return envs


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1]
    block = quick_start.split("```console\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def _ci_tox_runs() -> list[str]:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    return re.findall(r"^tox -e (.+)$", script, flags=re.MULTILINE)


def test_ci_runs_only_tox_envs_that_exist_and_every_listed_one() -> None:
    envs = _tox_envs()
    ran = [run.split()[0] for run in _ci_tox_runs()]
    assert set(ran) <= set(envs)
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    listed = {name.strip() for name in tox["tox"]["env_list"].split(",")}
    assert listed == set(ran)


def test_ci_runs_the_readme_commands_through_tox() -> None:
    install_and_conformance, tests = _readme_commands()
    readme_conformance = install_and_conformance.split("&&", 1)[1].strip()
    conformance = _tox_envs()["conformance"]["commands"].replace("{posargs}", "").strip()
    assert conformance == readme_conformance
    assert readme_conformance.startswith("pytest conformance --talos-emulator")
    assert "conformance" in _ci_tox_runs()
    assert tests == "pytest -n auto"
    assert _tox_envs()["py"]["commands"].strip() == "pytest {posargs}"
    assert "py -- -n auto" in _ci_tox_runs()


def test_lint_checks_the_format_too() -> None:
    commands = _tox_envs()["lint"]["commands"].split("\n")
    assert {"ruff check .", "ruff format --check .", "lint-imports"} <= {
        c.strip() for c in commands
    }


def _requirements(groups: dict[str, list[Any]], name: str) -> list[str]:
    found: list[str] = []
    for entry in groups[name]:
        if isinstance(entry, dict):
            found += _requirements(groups, entry["include-group"])
        else:
            found.append(entry)
    return found


def test_every_tool_is_pinned_to_one_exact_version() -> None:
    groups = _pyproject()["dependency-groups"]
    tools = _requirements(groups, "dev")
    assert all(re.fullmatch(r"[A-Za-z0-9_.\[\]-]+==[0-9][0-9A-Za-z.]*", tool) for tool in tools)
    names = [tool.split("==")[0].lower() for tool in tools]
    assert {
        "ruff",
        "mypy",
        "import-linter",
        "mkdocs",
        "mkdocs-material",
        "mkdocstrings",
        "mkdocstrings-python",
        "tox",
        "pre-commit",
    } <= set(names)
    assert len(set(tools)) == len(set(names))  # one version per tool, even when included twice
    envs = _tox_envs()
    for env in ("lint", "type", "protos-check", "docs"):
        assert envs[env]["dependency_groups"].strip() in groups


def test_pre_commit_hooks_run_the_pinned_tools_from_the_environment() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert {repo["repo"] for repo in config["repos"]} == {"local"}
    assert all(hook["language"] == "system" for hook in hooks)
    entries = {hook["entry"].split()[0] for hook in hooks}
    assert entries == {"ruff", "lint-imports", "python", "mypy", "mkdocs"}


def test_the_docs_site_lists_every_page_and_public_module() -> None:
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages: list[str] = []

    def walk(items: list[Any]) -> None:
        for item in items:
            for value in item.values():
                if isinstance(value, list):
                    walk(value)
                else:
                    pages.append(value)

    walk(site["nav"])
    on_disk = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert set(pages) == on_disk
    assert site["strict"] is True
    exported = {"client", "cluster", "node", "checks", "errors", "talosconfig", "patches", "ports"}
    assert {f"reference/{name}.md" for name in exported} <= set(pages)
    for name in exported:
        page = (ROOT / "docs" / "reference" / f"{name}.md").read_text(encoding="utf-8")
        assert f"::: pytest_talos.{name}\n" in page


def test_the_license_is_the_one_pyproject_declares() -> None:
    assert _pyproject()["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
