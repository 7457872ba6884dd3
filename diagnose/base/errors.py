"""Typed errors that map to the documented exit codes, so the CLI never shows a traceback."""

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_WORKLOAD_FAILED = 3


class DiagnoseError(Exception):
    """Base class: an error with a one-line message and an exit code."""

    exit_code = EXIT_BAD_INPUT


class UsageError(DiagnoseError):
    """The command line was wrong (unknown option, malformed --set, bad target spelling)."""

    exit_code = EXIT_BAD_INPUT


class InputError(DiagnoseError):
    """The target could not be read: missing, truncated, not a kineto trace, empty."""

    exit_code = EXIT_BAD_INPUT


class WorkloadError(DiagnoseError):
    """The user's workload failed (exception, out of memory, timeout) before a capture was usable."""

    exit_code = EXIT_WORKLOAD_FAILED
