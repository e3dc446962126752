"""Closing the synchronous client while other threads wait on its calls (a fan-out's reads
when the run stops): each waiting call ends with a TransportError at once, over real mTLS
to an emulated cluster whose every hop takes seconds, and no thread is left waiting on a
loop that no longer runs (the interpreter joins such threads at exit, and would hang)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pytest_talos.client import TalosClient
from pytest_talos.client._sync import _LoopThread
from pytest_talos.emulator import EmulatedCluster
from pytest_talos.errors import TransportError

LATENCY = 5.0  # seconds a hop takes: a call is still in flight long after close()


def test_a_call_another_thread_waits_on_ends_when_the_client_closes() -> None:
    outcomes: list[BaseException | str] = []
    with EmulatedCluster(controlplanes=1, workers=0, latency=LATENCY) as cluster:
        client = TalosClient.from_talosconfig(cluster.talosconfig_path, timeout=60.0, env={})

        def call() -> None:
            try:
                client.version()
                outcomes.append("answered")
            except BaseException as exc:  # the outcome is what the test judges
                outcomes.append(exc)

        waiting = threading.Thread(target=call, name="waiting-call")
        waiting.start()
        time.sleep(0.5)  # the call is on its way (its connection alone takes 2 hops)
        client.close()
        waiting.join(3 * LATENCY)  # the call itself would take at least 3 hops more

    assert not waiting.is_alive(), "the waiting call still waits on the closed client"
    assert len(outcomes) == 1
    assert isinstance(outcomes[0], TransportError), outcomes
    assert "closed" in str(outcomes[0])


def test_a_call_after_close_is_refused() -> None:
    with EmulatedCluster(controlplanes=1, workers=0) as cluster:
        client = TalosClient.from_talosconfig(cluster.talosconfig_path, env={})
        client.version()
        client.close()
        with pytest.raises(TransportError, match="closed"):
            client.version()


def test_a_wait_that_is_no_call_ends_when_the_loop_stops() -> None:
    """What closing the connection does not end (a retry's back-off, a connect under way):
    the loop thread cancels it before it stops, so the thread waiting on it wakes."""
    runner = _LoopThread("10.5.0.2:50000")
    outcomes: list[BaseException | str] = []

    def wait() -> None:
        try:
            runner.run(asyncio.sleep(60))
            outcomes.append("slept")
        except BaseException as exc:  # the outcome is what the test judges
            outcomes.append(exc)

    waiting = threading.Thread(target=wait, name="waiting-sleep")
    waiting.start()
    time.sleep(0.2)
    runner.stop()
    waiting.join(30)

    assert not waiting.is_alive(), "the thread still waits on a loop that stopped"
    assert isinstance(outcomes[0], TransportError), outcomes
    assert "closed while this call ran" in str(outcomes[0])
