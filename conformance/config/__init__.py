"""Conformance checks: config."""
