"""Endpoint: one value, parsed once where endpoint text enters (the forms are in
test_talosconfig's normalization tests, which go through the same parser)."""

from __future__ import annotations

import ssl

import pytest

from pytest_talos.endpoint import Endpoint
from pytest_talos.errors import ConfigError
from pytest_talos.transport import FakeTransport, GrpcTransport, split_endpoint


@pytest.mark.parametrize(
    ("text", "host", "port", "address"),
    [
        ("cp-1", "cp-1", 50000, "cp-1:50000"),
        ("10.5.0.2:50001", "10.5.0.2", 50001, "10.5.0.2:50001"),
        ("[fd00:0::2]:6443", "fd00::2", 6443, "[fd00::2]:6443"),
        ("fd00::2", "fd00::2", 50000, "[fd00::2]:50000"),
        ("https://omni.example.com", "omni.example.com", 443, "omni.example.com:443"),
    ],
)
def test_parse_gives_host_port_and_the_printed_address(
    text: str, host: str, port: int, address: str
) -> None:
    endpoint = Endpoint.parse(text)

    assert (endpoint.host, endpoint.port, endpoint.server_name) == (host, port, None)
    assert endpoint.address == str(endpoint) == address
    assert split_endpoint(text) == (host, port)


def test_the_server_name_travels_with_the_endpoint() -> None:
    endpoint = Endpoint.parse("10.5.0.2", server_name="cp-1.lab")

    assert endpoint == Endpoint("10.5.0.2", 50000, "cp-1.lab")
    assert endpoint.address == "10.5.0.2:50000"  # the name is verified, not dialled


def test_bad_text_is_one_config_error_naming_where_it_was_read() -> None:
    with pytest.raises(ConfigError) as caught:
        Endpoint.parse("h:99999", path="/tmp/talosconfig", key="contexts[a].endpoints[0]")

    assert caught.value.path == "/tmp/talosconfig"
    assert caught.value.key == "contexts[a].endpoints[0]"
    assert "'h:99999' is not a valid endpoint: port '99999' is not a number" in str(caught.value)
    assert "use host, host:port, [ipv6]:port or https://host[:port]" in str(caught.value)


def test_both_transports_take_text_or_an_endpoint() -> None:
    parsed = Endpoint.parse("[fd00::2]:50001")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)

    assert GrpcTransport("[fd00::2]:50001", ctx).endpoint == parsed
    assert GrpcTransport(parsed, ctx).endpoint is parsed
    assert FakeTransport({}, endpoint="[fd00::2]:50001").endpoint == parsed
    with pytest.raises(ConfigError, match="not a valid endpoint"):
        GrpcTransport("bad host", ctx)
