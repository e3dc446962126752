"""Conformance checks: cluster."""
