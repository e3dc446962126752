"""Conformance checks: immutability."""
