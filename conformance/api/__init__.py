"""Conformance checks: api."""
