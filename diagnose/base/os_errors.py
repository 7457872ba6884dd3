"""What the operating system refuses, said in one line: the path, what happened, what to do.

Every command reaches the machine through the same few calls (open, write, rename, mkdir, getcwd),
and any of them may fail for reasons that are no fault of diagnose nor of its input: a full disk,
a file-size limit (`ulimit -f`), a name too long, a permission, a folder removed while diagnose
ran, the working folder deleted, stdout on /dev/full. The entry point (diagnose/commands/__init__.py) hands any
OSError that got that far to `describe`, prints the line, and exits 2 (README, "Exit codes");
the output folder's staging is discarded on the way out, so the previous output stays as it was.

The terminal's side lives here too: `keep_std_streams` gives a closed stdin, stdout or stderr
/dev/null (so the output is dropped quietly and no file diagnose opens takes the number 1 or 2),
and `ascii_spellings` lets a stream that cannot encode UTF-8 (PYTHONIOENCODING=ascii, a latin-1
locale) print "us" and "x" where the report says "µs" and "×", rather than fail.
"""

from __future__ import annotations

import codecs
import errno
import os
import sys
import unicodedata

STDOUT = "standard output"

# errno -> what to do about it (the system's own words say what happened)
_ADVICE = {
    errno.ENOSPC: "free some space, or give -o a folder on another filesystem",
    errno.EDQUOT: "the disk quota is used up: free some space, or give -o a folder elsewhere",
    errno.EFBIG: "a file went past this process's file-size limit (ulimit -f) or the filesystem's: "
    "raise the limit, or give -o a folder elsewhere",
    errno.ENAMETOOLONG: "give a shorter path",
    errno.EACCES: "check its permissions, or give another path",
    errno.EPERM: "check its permissions, or give another path",
    errno.EROFS: "the filesystem is read-only: give -o a folder on a writable one",
    errno.EISDIR: "a folder is where a file was expected: give the file",
    errno.ENOTDIR: "a file is where a folder was expected: check the path",
    errno.ENXIO: "a special file (a socket or a device with nothing behind it): give a regular file",
    errno.ENODEV: "a special file: give a regular file",
    errno.ENOENT: "it went away while diagnose ran (removed or renamed by another process, the workload "
    "perhaps): run again",
    errno.ESTALE: "it went away on the file server while diagnose ran: run again",
    errno.EIO: "the device reported an error: check the disk or the mount",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n)",
    errno.ENFILE: "too many open files on this machine: try again later",
    errno.ENOMEM: "the machine ran out of memory: close other programs, or analyse a smaller trace",
    errno.ELOOP: "symbolic links loop: give the file itself",
    errno.ETXTBSY: "the file is busy: try again once whatever holds it has finished",
    errno.EBADF: "the file was closed under diagnose: check how it was started",
    errno.EPIPE: "the reader went away",
}
_ABOUT_OUTPUT = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def describe(exc: OSError) -> str:
    """One line for `exc`: which path, what the system said, what to do (no traceback, no errno number)."""
    reason = exc.strerror or type(exc).__name__
    path = exc.filename
    if path is None and exc.errno == errno.ENOENT and not _cwd_exists():
        return "the current folder no longer exists (it was removed): cd to a folder that exists and run again"
    where = f"{_shown(path)}: " if path is not None else ""
    if exc.filename2 is not None:
        where = f"{_shown(path)} -> {_shown(exc.filename2)}: "
    advice = _ADVICE.get(exc.errno) if exc.errno is not None else None
    if path == STDOUT:
        advice = "send stdout somewhere that takes it (the output folder is written)"
    line = f"{where}{reason}" + (f": {advice}" if advice else "")
    if exc.errno in _ABOUT_OUTPUT and path != STDOUT:
        line += "; the previous output folder, if any, is left as it was"
    return line


SHOWN_PATH = 160  # characters of a path the line shows (its head and tail, the middle elided)


def _shown(path) -> str:
    """A path as the one line shows it: whole, or its start and end around an ellipsis when very long (a
    4,000-character -o path would otherwise fill the terminal)."""
    text = os.fsdecode(path)
    if len(text) <= SHOWN_PATH:
        return text
    half = SHOWN_PATH // 2
    return f"{text[:half]}…{text[-half:]} ({len(text):,} characters)"


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except OSError:
        return False
    return True


def on_stdout(exc: OSError) -> OSError:
    """`exc`, raised by a write to stdout, as the same error naming standard output."""
    return type(exc)(exc.errno, exc.strerror, STDOUT) if exc.errno is not None else exc


def keep_std_streams() -> None:
    """Give each of stdin, stdout and stderr that is closed (`diagnose ... >&-`) /dev/null, so output
    to it is dropped quietly and no file diagnose opens later is given its number."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:  # a lower number was free after all
                os.dup2(opened, fd)
                os.close(opened)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8", errors=SPELLINGS))


def ascii_spellings(*streams) -> None:
    """Make each text stream that cannot encode all of Unicode write ASCII spellings ("us" for "µs",
    "x" for "×", "->" for "→") for what its encoding lacks, instead of raising UnicodeEncodeError."""
    for stream in streams:
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if encoding.startswith("utf") or not hasattr(stream, "reconfigure"):
            continue
        try:
            stream.reconfigure(errors=SPELLINGS)
        except (ValueError, OSError):  # a stream that is closed or cannot change its settings
            pass


SPELLINGS = "diagnose-ascii"
_SPELLED = {
    "µ": "u",
    "μ": "u",
    "×": "x",
    "·": "-",
    "→": "->",
    "←": "<-",
    "≥": ">=",
    "≤": "<=",
    "≈": "~",
    "±": "+/-",
    "…": "...",
    "—": "-",
    "–": "-",
    "−": "-",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "•": "*",
    "✓": "ok",
    "✗": "x",
    "▲": "^",
    "▼": "v",
    "█": "#",
    "░": ".",
}


def _spell(char: str) -> str:
    """An ASCII spelling of `char`: the table, box-drawing lines, the letter without its accent, else '?'."""
    if char in _SPELLED:
        return _SPELLED[char]
    name = unicodedata.name(char, "")
    if name.startswith("BOX DRAWINGS"):
        return "|" if "VERTICAL" in name and "HORIZONTAL" not in name else "-" if "HORIZONTAL" in name else "+"
    base = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode("ascii")
    return base or "?"


def _spellings(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(_spell(c) for c in exc.object[exc.start : exc.end]), exc.end


codecs.register_error(SPELLINGS, _spellings)
