"""Start a chaos worker that dies with the run: ``python -m stream_adapter_dev.chaos.child PID``.

Each chaos worker runs in a session of its own (a kill takes its whole process group, not the
run), so when the run itself is killed nothing stopped its workers: they went on retrying a
broker that was gone, using the machine's CPU until someone found them. On Linux this asks
the kernel to SIGKILL the process when its parent dies (`PR_SET_PDEATHSIG`, kept across the
exec), then becomes the worker. PID is the run's process id: if it is already gone, so is
the worker.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent exits (Linux; elsewhere a no-op);
    exit at once if the parent is gone already."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)


def main() -> None:
    die_with_parent(int(sys.argv[1]))
    os.execv(sys.executable, [sys.executable, "-m", "stream_adapter", "worker"])


if __name__ == "__main__":
    main()
