"""Conformance checks: vendor."""
