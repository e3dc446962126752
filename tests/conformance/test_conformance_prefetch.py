"""Fan-outs begun with the run (conformance/_support/prefetch.py): a registered read-only
check's reads start at the run's first check, not its module's; each test is served its
node's read by the same rules (once, fresh, usable); a run that changes nodes begins none.
Also the reads of every node at once that cluster-wide checks make (each_at_once,
AddressBook.of_all)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from conformance._support import prefetch
from conformance._support.fanout import FanOut, each_at_once
from conformance.kubernetes.node_addresses import AddressBook
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode
from tests.conformance.suite_runner import run_suite

BEGUN_LINE = "read-only checks begun on every node at once"


@dataclass(frozen=True)
class _Node:
    address: str
    name: str = ""


@dataclass
class _Slow:
    """A read that takes ``delay`` s, recording when each node's read began."""

    delay: float = 0.1
    began: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, node: Any) -> str:
        with self.lock:
            self.began[node.address] = time.monotonic()
        time.sleep(self.delay)
        return f"read {node.address}"


def _nodes(count: int) -> list[TalosNode]:
    return [cast(TalosNode, _Node(f"10.0.1.{i}", f"n{i}")) for i in range(1, count + 1)]


def test_a_begun_fan_out_reads_before_any_test_asks_and_serves_those_reads() -> None:
    nodes = _nodes(3)
    reads = _Slow(delay=0.2)
    fan = FanOut(nodes, reads, max_age=60.0)

    asked = time.monotonic()
    fan.begin()
    time.sleep(0.3)  # the reads end before the first test asks
    assert set(reads.began) == {n.address for n in nodes}
    assert all(at - asked < 0.2 for at in reads.began.values())
    assert [fan.get(n) for n in nodes] == [f"read {n.address}" for n in nodes]
    assert fan.rounds == 1  # served from the begun reads, not read again
    fan.begin()  # once served, beginning again reads nothing more
    assert fan.rounds == 1


def test_abandoning_drops_the_reads_not_yet_begun() -> None:
    nodes = _nodes(4)
    reads = _Slow(delay=0.2)
    fan = FanOut(nodes, reads, max_age=60.0, readers=1)

    fan.begin()
    time.sleep(0.05)
    fan.abandon()
    time.sleep(0.3)
    assert len(reads.began) == 1  # the read under way ended; the three queued never began


def test_each_at_once_keeps_the_order_reads_together_and_raises_the_first_error() -> None:
    reads = _Slow(delay=0.2)
    items = _nodes(5)
    started = time.monotonic()
    assert each_at_once(items, reads) == [f"read {n.address}" for n in items]
    assert time.monotonic() - started < 0.2 * 3  # not one after another
    assert len(reads.began) == 5

    def fails_on_two_and_four(node: Any) -> str:
        if node.address.endswith((".2", ".4")):
            raise TalosError(f"{node.address} refused")
        return "ok"

    with pytest.raises(TalosError, match=r"10\.0\.1\.2 refused"):
        each_at_once(items, fails_on_two_and_four)


class _AddressNode:
    """A node whose AddressStatuses/LinkStatuses list reads fail ``fail`` times first."""

    def __init__(self, address: str, fail: int = 0) -> None:
        self.address = address
        self.name = address
        self.fail = fail
        self.lists = 0

    def resources(self, kind: str, namespace: str) -> list[Any]:
        self.lists += 1
        if self.fail:
            self.fail -= 1
            raise TalosError(f"{self.address}: {kind} unreadable")
        return []


def test_the_address_book_reads_every_node_at_once_and_keeps_only_what_was_read() -> None:
    good, bad = _AddressNode("10.0.2.1"), _AddressNode("10.0.2.2", fail=1)
    book = AddressBook()
    nodes = cast(list[TalosNode], [good, bad])

    first = book.of_all(nodes)
    assert not isinstance(first[good.address], TalosError)
    assert isinstance(first[bad.address], TalosError)
    again = book.of_all(nodes)  # the good node is kept, the failed one read again
    assert good.lists == 2
    assert bad.lists == 3
    assert not isinstance(again[bad.address], TalosError)


def test_one_test_name_takes_one_starter() -> None:
    def start(*_args: Any) -> FanOut[Any]:
        return FanOut([], lambda node: node, max_age=1.0)

    prefetch.at_run_start("test_prefetch_unit_only", start)
    prefetch.at_run_start("test_prefetch_unit_only", start)  # the same again: fine
    with pytest.raises(ValueError, match="two fan-outs registered"):
        prefetch.at_run_start("test_prefetch_unit_only", lambda *_args: start())


# ------------------------------------------------------------------------ a run, end to end

_PREFETCHED = "pid1 or package_manager or root_filesystem or version_api_matches"


# A fault for each check whose reads begin early (read-only: each shows without a change of
# the run's; services-resource-stale needs a service stopped, which a read-only run never does)
_FAULTS = {
    "shell-present": "immutability.no-shell-or-ssh",
    "usr-writable": "immutability.rootfs-read-only",
    "package-manager-present": "immutability.no-package-manager",
    "pid1-not-machined": "immutability.pid1-is-machined",
    "wrong-version": "api.version-matches-resource",
    "logs-broken": "services.logs-readable",
    "reader-reads-secrets": "api.reader-cannot-read-secrets",
    "extra-port": "immutability.only-expected-ports",
    "member-hidden": "cluster.members-consistent",
    "cidr-overlap": "kubernetes.cidrs-clear-of-nodes",
}


def test_a_read_only_run_begins_the_reads_at_its_start_and_still_fails_what_is_broken(
    tmp_path: Path,
) -> None:
    faults = [arg for fault in _FAULTS for arg in ("--talos-emulator-fault", fault)]
    run = run_suite(["--talos-emulator", *faults], tmp_path / "report")
    assert BEGUN_LINE in run.output, run.describe()
    outcomes = run.outcomes()
    for fault, check in _FAULTS.items():
        assert "failed" in outcomes[check], f"{fault}: {check} {outcomes[check]}"
    healthy = run_suite(["--talos-emulator", "-k", _PREFETCHED], tmp_path / "healthy")
    assert healthy.returncode == 0, healthy.describe()
    assert BEGUN_LINE in healthy.output


def test_a_run_that_changes_nodes_begins_no_reads_early(tmp_path: Path) -> None:
    run = run_suite(
        [
            "--talos-emulator",
            "--talos-allow",
            "mutating",
            "-k",
            f"{_PREFETCHED} or reader_cannot_change_the_node",
        ],
        tmp_path / "report",
    )
    assert run.returncode == 0, run.describe()
    assert BEGUN_LINE not in run.output
    assert run.outcomes()["immutability.pid1-is-machined"] == {"passed"}
