"""Cluster-wide checks read every node at once: read_each (cluster.members-consistent)
and AddressBook.of_all (kubernetes.cidrs-clear-of-nodes)."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest

from conformance.kubernetes.node_addresses import AddressBook
from pytest_talos.cluster import read_each
from pytest_talos.errors import TalosError
from pytest_talos.node import TalosNode


class _Slow:
    """A read of ``delay`` s that counts how many run at once."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0

    def __call__(self, item: str) -> str:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(self.delay)
        with self.lock:
            self.in_flight -= 1
        return f"read {item}"


def test_read_each_reads_together_and_keeps_the_order() -> None:
    reads = _Slow(0.2)
    items = [f"n{i}" for i in range(5)]
    assert read_each(items, reads) == [f"read {i}" for i in items]
    assert reads.most == 5  # not one after another


def test_read_each_is_bounded() -> None:
    reads = _Slow(0.05)
    read_each([f"n{i}" for i in range(6)], reads, at_once=2)
    assert reads.most == 2


def test_read_each_raises_the_first_error_in_order() -> None:
    def read(item: str) -> str:
        if item in ("n2", "n4"):
            time.sleep(0.1 if item == "n2" else 0.0)  # n4 fails first in time
            raise TalosError(f"{item} refused")
        return item

    with pytest.raises(TalosError, match="n2 refused"):
        read_each(["n1", "n2", "n3", "n4"], read)


class _AddressNode:
    """A node whose AddressStatuses/LinkStatuses lists fail ``fail`` times first."""

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


def test_the_address_book_reads_every_node_and_keeps_only_what_was_read() -> None:
    good, bad = _AddressNode("10.0.2.1"), _AddressNode("10.0.2.2", fail=1)
    book = AddressBook()
    nodes = cast(list[TalosNode], [good, bad])

    first = book.of_all(nodes)
    assert not isinstance(first[good.address], TalosError)
    assert isinstance(first[bad.address], TalosError)
    again = book.of_all(nodes)
    assert good.lists == 2  # read once (two lists), then kept
    assert bad.lists == 3  # the failed read is not kept: read again
    assert not isinstance(again[bad.address], TalosError)
