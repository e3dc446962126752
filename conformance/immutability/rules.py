"""The rules of the immutability checks that need no node (unit-tested on their own)."""

from __future__ import annotations

from pytest_talos import models

__all__ = ["MACHINED_ARGS", "MACHINED_COMMAND", "MACHINED_EXECUTABLES", "is_machined"]

# Talos's PID 1 is machined: the Dockerfile installs it as /usr/bin/init, the kernel (or
# Docker's entrypoint) starts it as /sbin/init, which /sbin -> usr/bin resolves. Processes
# reports readlink(/proc/1/exe) (internal/pkg/miniprocfs/processes.go), so the executable is
# /usr/bin/init; images from before the usr-merge had the binary at /sbin/init itself.
MACHINED_EXECUTABLES = frozenset({"/usr/bin/init", "/sbin/init"})
MACHINED_COMMAND = "init"  # /proc/1/comm; systemd renames itself "systemd"
MACHINED_ARGS = frozenset({"/sbin/init", "/usr/bin/init"})


def is_machined(init: models.ProcessInfo) -> bool:
    """machined by every field Processes gives: systemd installed as /sbin/init shows
    either its own executable or its own command name, and never passes."""
    words = init.args.split()
    fields = (init.command, init.executable, *words[:1])
    if any("systemd" in field for field in fields):
        return False
    return (
        init.command == MACHINED_COMMAND
        and init.executable in MACHINED_EXECUTABLES
        and len(words) == 1
        and words[0] in MACHINED_ARGS
    )
