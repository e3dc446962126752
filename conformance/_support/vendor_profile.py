"""The vendor acceptance profile lives in the conformance plugin now
(:mod:`pytest_talos.plugin.conformance.vendor_profile`); this name keeps working."""

from pytest_talos.plugin.conformance.vendor_profile import *  # noqa: F403
from pytest_talos.plugin.conformance.vendor_profile import __all__  # noqa: F401
