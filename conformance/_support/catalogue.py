"""The check catalogue lives in the conformance plugin now
(:mod:`pytest_talos.plugin.conformance.catalogue`); this name keeps working."""

from pytest_talos.plugin.conformance.catalogue import *  # noqa: F403
from pytest_talos.plugin.conformance.catalogue import __all__  # noqa: F401
