"""The private parts of grpclib that the transport and the emulator build on, pinned down.

``pyproject.toml`` accepts only the grpclib releases these hooks were checked against (the
floor is tested by ``tox -e grpclib-floor``). When a new grpclib renames or reshapes one of
them, this module fails first, naming the hook, before any call fails in a confusing way:

* transport (``pytest_talos/transport/_channel.py``): ``TalosChannel`` overrides
  ``Channel._create_connection`` and reads ``_host``, ``_port``, ``_config``, ``_h2_config``;
  its protocol subclasses ``H2Protocol(handler, config, h2_config)`` with
  ``grpclib.client.Handler``;
* emulator (``pytest_talos/emulator/apid/gate.py``): ``CheckedServer`` overrides
  ``Server._protocol_factory`` and rebuilds the protocol from its ``handler``, ``config`` and
  ``h2_config``; routes are objects with ``__mapping__()``;
* emulator (``pytest_talos/emulator/apid/status.py`` ``handler_failure``): a server
  ``Stream``'s ``_stream.wrapper``, whose ``cancelled`` says grpclib cancelled the call.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from typing import Any

import grpclib
from grpclib.client import Channel, Handler
from grpclib.config import Configuration
from grpclib.protocol import AbstractHandler, H2Protocol
from grpclib.server import Server

from pytest_talos.transport._channel import TalosChannel

TESTED_VERSIONS = ("0.4.8", "0.4.9")  # keep in step with the grpclib pin of pyproject.toml


def _parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_installed_grpclib_is_one_the_hooks_were_checked_against() -> None:
    assert grpclib.__version__ in TESTED_VERSIONS, (
        f"grpclib {grpclib.__version__} is not one of {TESTED_VERSIONS}: check the hooks "
        "below against its source, then widen the pin and TESTED_VERSIONS together"
    )


def test_channel_connects_through_create_connection() -> None:
    hook = Channel._create_connection
    assert inspect.iscoroutinefunction(hook)
    assert _parameters(hook) == ["self"]
    # The override only matters if grpclib still opens connections through it.
    assert "self._create_connection()" in inspect.getsource(Channel.__connect__)


def test_channel_keeps_the_attributes_the_override_reads() -> None:
    async def build() -> Channel:
        config = Configuration(ssl_target_name_override="node-1")
        return Channel(
            "127.0.0.1", 50000, ssl=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), config=config
        )

    channel = asyncio.run(build())
    assert (channel._host, channel._port) == ("127.0.0.1", 50000)
    assert channel._config.ssl_target_name_override == "node-1"
    assert channel._h2_config.client_side


def test_our_channel_still_overrides_a_method_grpclib_defines() -> None:
    assert TalosChannel._create_connection is not Channel._create_connection
    assert "_create_connection" in vars(Channel)


def test_h2_protocol_is_built_from_handler_config_and_h2_config() -> None:
    assert _parameters(H2Protocol.__init__) == ["self", "handler", "config", "h2_config"]
    assert issubclass(Handler, AbstractHandler)
    assert _parameters(Handler) == []
    source = inspect.getsource(H2Protocol.__init__)
    for attribute in ("self.handler", "self.config", "self.h2_config"):
        assert attribute in source, f"H2Protocol no longer sets {attribute}"
    for method in ("connection_made", "data_received", "connection_lost"):
        assert method in vars(H2Protocol), f"H2Protocol no longer defines {method}"


def test_server_makes_its_protocols_through_protocol_factory() -> None:
    hook = Server._protocol_factory
    assert not inspect.iscoroutinefunction(hook)
    assert _parameters(hook) == ["self"]
    assert "self._protocol_factory" in inspect.getsource(Server.start)


def test_server_takes_routes_from_mapping_objects() -> None:
    class Routes:
        def __mapping__(self) -> dict[str, Any]:
            return {}

    async def build() -> H2Protocol:
        return Server([Routes()])._protocol_factory()

    protocol = asyncio.run(build())
    assert isinstance(protocol, H2Protocol)
    assert protocol.handler is not None
    assert protocol.config is not None
    assert protocol.h2_config is not None


def test_a_server_stream_keeps_the_wrapper_the_emulator_reads() -> None:
    import grpclib.server
    import grpclib.utils

    # request_handler files the call's wrapper on the protocol stream, which the server
    # Stream keeps as _stream; Wrapper.cancel() sets cancelled.
    assert "_stream.wrapper = " in inspect.getsource(grpclib.server.request_handler)
    assert "self._stream = stream" in inspect.getsource(grpclib.server.Stream.__init__)
    assert "self.cancelled = True" in inspect.getsource(grpclib.utils.Wrapper.cancel)
