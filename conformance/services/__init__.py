"""Conformance checks: services."""
