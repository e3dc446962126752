"""``python -m pytest_talos.ports``: the port scanner's command line."""

import sys

from pytest_talos.ports.cli import main

sys.exit(main())
