"""The suite's options live in the conformance plugin now
(:mod:`pytest_talos.plugin.conformance.settings`); this name keeps working for the checks."""

from pytest_talos.plugin.conformance.settings import *  # noqa: F403
from pytest_talos.plugin.conformance.settings import __all__  # noqa: F401
