"""Conformance checks: upgrade."""
