"""Writing a file without ever writing through a link planted where it goes.

A workload runs as the same user as diagnose and may leave anything in the folder its capture
is written to, a symbolic link at `trace.json.gz` or `meta.json` included. Every file diagnose
writes there is written under a fresh, unguessable name (created exclusively, never through a
link) and renamed onto its final name: the rename replaces a planted link itself, never the
file it points to.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

_NAME_ROOM = 100  # characters of the final name kept in the temporary one (names are limited to 255 bytes)


def fresh_path(path: str | Path) -> Path:
    """A new, unguessable sibling of `path` keeping its suffixes (`.x-3f9a….json.gz`), for writing a file
    that is then renamed onto `path`: nothing planted at `path` (a link) is ever written through."""
    path = Path(path)
    return path.with_name(f".{secrets.token_hex(8)}-{path.name[:_NAME_ROOM]}")


def write_new(path: str | Path, data: bytes) -> None:
    """Write `data` at `path` without following a link there: into a fresh file, then renamed into place
    (a rename replaces a link planted at `path`, never the file it points to)."""
    path = Path(path)
    tmp = fresh_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _naming(exc, path) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """`exc` naming `path` (the file meant, not its temporary name), for the one line the CLI prints."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(path))
