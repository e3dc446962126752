"""The pytest-talos conformance suite: run it with ``pytest conformance`` (docs/conformance.md).

The wheel installs this folder as the package ``pytest_talos_conformance`` (``talos-conformance``
or ``pytest --pyargs pytest_talos_conformance`` run it); its modules import each other as
``conformance.*``, so under the installed name this package also answers to ``conformance``.
"""

import sys as _sys

if __name__ != "conformance" and "conformance" not in _sys.modules:
    _sys.modules["conformance"] = _sys.modules[__name__]
