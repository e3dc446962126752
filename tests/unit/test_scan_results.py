"""``ScanResult``: kept compact (the ports scanned, the states of those not closed), the same
result whether built from every port's ``PortResult`` or from the states."""

from __future__ import annotations

import pytest

from pytest_talos.ports import PortResult, PortState, ScanResult

PORTS = tuple(range(1, 65536))


def _full(ports: tuple[int, ...], states: dict[int, PortState]) -> ScanResult:
    results = [PortResult(p, states.get(p, "closed")) for p in ports]
    return ScanResult("10.5.0.2", results, 1.5, shared=(9100,), address="10.5.0.2")


def test_built_from_states_it_equals_the_result_built_port_by_port() -> None:
    states: dict[int, PortState] = {50000: "open", 10250: "open", 69: "filtered"}
    compact = ScanResult.from_states(
        "10.5.0.2", PORTS, states, elapsed=1.5, shared=(9100,), address="10.5.0.2"
    )
    full = _full(PORTS, states)

    assert compact == full
    assert hash(compact) == hash(full)
    assert compact.open_ports == full.open_ports == (10250, 50000)
    assert compact.filtered == (69,)
    assert len(compact.closed) == 65532
    assert compact.results[68] == PortResult(69, "filtered")
    assert compact.summary() == full.summary()
    assert "2 open, 65532 closed, 1 filtered of 65535 ports" in compact.summary()


def test_state_of_a_port_scanned_or_not() -> None:
    result = ScanResult.from_states("h", (22, 80, 50000), {50000: "open"}, elapsed=0.1)

    assert result.state_of(50000) == "open"
    assert result.state_of(22) == "closed"
    with pytest.raises(KeyError):
        result.state_of(443)


def test_ports_scanned_in_another_order_keep_that_order() -> None:
    result = ScanResult.from_states(
        "h", (8080, 22, 443), {443: "open", 8080: "open", 22: "filtered"}, elapsed=0.1
    )

    assert result.open_ports == (8080, 443)
    assert [r.port for r in result.results] == [8080, 22, 443]
    assert result.closed == ()


@pytest.mark.parametrize(
    ("ports", "states"),
    [((22, 80), {443: "open"}), ((80, 22, 80), {}), ((22, 80), {21: "open"})],
    ids=["unscanned-port", "duplicate-port", "unscanned-below"],
)
def test_a_state_for_a_port_not_scanned_or_a_port_twice_is_refused(
    ports: tuple[int, ...], states: dict[int, PortState]
) -> None:
    with pytest.raises(ValueError, match="scan"):
        ScanResult.from_states("h", ports, states, elapsed=0.1)


def test_it_is_immutable() -> None:
    result = ScanResult.from_states("h", (22,), {}, elapsed=0.1)

    with pytest.raises(AttributeError, match="immutable"):
        result.host = "other"
    with pytest.raises(AttributeError, match="immutable"):
        del result.elapsed
