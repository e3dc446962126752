"""Helpers of the conformance suite (no checks here; pytest collects only test_*.py)."""
