"""Conformance checks: kubernetes."""
