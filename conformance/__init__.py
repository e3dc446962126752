"""The pytest-talos conformance suite: run it with ``pytest conformance`` (docs/conformance.md)."""
