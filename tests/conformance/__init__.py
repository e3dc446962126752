"""Tests of the conformance suite itself: the fault matrix, options, reports, profiles."""
