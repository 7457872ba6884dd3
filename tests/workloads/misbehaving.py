"""Test workloads that end badly without raising: a hang and a hard crash."""

import os
import signal
import time


def make_sleeper():
    """Each step sleeps far longer than the test's --timeout."""
    return lambda: time.sleep(60)


def make_crasher():
    """The process kills itself with SIGKILL on the first step (stands in for a segfault)."""
    return lambda: os.kill(os.getpid(), signal.SIGKILL)


def not_a_factory():
    """Returns something that is not callable."""
    return 42
