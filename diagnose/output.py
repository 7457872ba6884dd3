"""The output folder of a run (`--out`), written whole or not at all.

A run's files (a capture's trace.json.gz, meta.json and workload.log; findings.json and
report.html; a sweep's point folders) are written into a staging folder beside the final one,
`.NAME.diagnose-staging-PID-RANDOM`, on the same filesystem, and renamed into place at the end.
So:

- two runs writing the same `--out` at once never mix: the last to finish wins, whole;
- a run that crashes or is interrupted leaves the previous folder as it was (and, when it is
  killed outright, a hidden staging folder that can be deleted);
- readers never see a half-written folder: on Linux the new folder takes the old one's place in
  one step (renameat2 RENAME_EXCHANGE); elsewhere the old folder is moved aside first, so for a
  moment there is none.

The folder is replaced whole, so an existing folder is only replaced when it is empty or
diagnose wrote it (it holds findings.json, meta.json, sweep.json or report.html); to write
beside files that must stay (re-analysing a capture folder into itself), stage with
`carry=True`, which starts the staging folder with (hard links to) what is there.

`check_out_path` validates `--out` before anything runs: an existing file, a path under a file,
a device such as /dev/null, a folder that cannot be written are a UsageError (exit 2, one line).
"""
from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Iterable

from diagnose.errors import UsageError

STAGING_MARK = ".diagnose-staging-"
OUTPUT_MARKERS = ("findings.json", "meta.json", "sweep.json", "report.html", "diff.json")
"""Files whose presence says diagnose wrote a folder (so it may be replaced whole)."""

REWRITTEN = ("findings.json", "report.html")
"""What an analysis writes again; not carried over from the folder it replaces."""

_NAME_ROOM = 100  # characters of the final name kept in the staging name (names are limited to 255 bytes)


def check_out_path(path: str | Path, carry: bool = False) -> Path:
    """The absolute path of the output folder `path`, or a UsageError saying in one line why it cannot be one.

    Refused: an existing file or device (/dev/null), a path under a file, the filesystem root,
    the current folder or one above it, a folder (or the nearest existing folder above it) that
    this process cannot create files in (permissions, a read-only filesystem, an immutable
    folder), and, unless `carry`, an existing folder holding files that diagnose did not write
    (replacing it would delete them).
    Nothing is created; the probes leave no trace.
    """
    shown = str(path)
    final = Path(os.path.abspath(Path(path).expanduser()))
    if final.is_symlink() and final.is_dir():
        final = final.resolve()
    if final.parent == final:
        raise UsageError(f"--out {shown}: the filesystem root cannot be an output folder")
    if Path.cwd().resolve().is_relative_to(final.resolve()):
        raise UsageError(f"--out {shown}: is the current folder or holds it, and the output folder is replaced "
                         "whole: name a folder inside it")
    if final.exists() and not final.is_dir():
        kind = "a device or special file" if not final.is_file() else "a file"
        raise UsageError(f"--out {shown}: is {kind}, not a folder")
    existing = _nearest_existing(final)
    if not existing.is_dir():
        raise UsageError(f"--out {shown}: {existing} is a file, so no folder can be made under it")
    if final.is_dir():
        _probe_writable(final, shown)
        if not carry and not _replaceable(final):
            raise UsageError(f"--out {shown}: holds files diagnose did not write, and the output folder is "
                             "replaced whole: give a new or empty folder")
    _probe_writable(final.parent if final.parent.is_dir() else existing, shown)
    return final


def _nearest_existing(path: Path) -> Path:
    """`path` itself or the closest folder above it that exists (or the file that blocks it)."""
    while not os.path.lexists(path) and path.parent != path:
        path = path.parent
    return path


def _probe_writable(folder: Path, shown: str) -> None:
    """Create and remove a folder in `folder`: the only test that read-only mounts and immutable folders answer."""
    probe = folder / f".diagnose-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        where = "" if folder == Path(os.path.abspath(Path(shown).expanduser())) else f" ({folder})"
        raise UsageError(f"--out {shown}: cannot write there{where}: {reason}") from None


def _replaceable(folder: Path) -> bool:
    """True when replacing `folder` whole loses nothing that is not diagnose's: empty, or diagnose wrote it."""
    names = set(os.listdir(folder))
    return not names or any(marker in names for marker in OUTPUT_MARKERS)


class OutputFolder:
    """Stages a run's outputs beside the final folder and renames them into place at the end.

        with OutputFolder(out) as folder:          # validated here (UsageError), staged on enter
            write_everything_into(folder.path)     # the staging folder
        # out now holds exactly what was written (the previous folder replaced whole)

    Leaving the block normally commits; an exception discards the staging folder and leaves the
    previous `out` untouched, unless `keep_on_error` was set True (e.g. once a capture is
    complete, so that what it recorded survives a failure of the analysis after it). With
    `carry=True` the staging folder starts with hard links (copies where links are refused) to
    what `out` holds now, except `rewritten` names, so a run can write beside its own input.
    """

    def __init__(self, final: str | Path, carry: bool = False, rewritten: Iterable[str] = REWRITTEN):
        self.final = check_out_path(final, carry=carry)
        self.carry = carry
        self.rewritten = frozenset(rewritten)
        self.keep_on_error = False
        self.staging: Path | None = None

    @property
    def path(self) -> Path:
        """Where to write now: the staging folder while open, the final folder once committed."""
        return self.staging if self.staging is not None else self.final

    def public(self, path: str | Path) -> Path:
        """Where `path` (inside the staging folder) will be once committed: for messages and reports."""
        path = Path(path)
        if self.staging is not None and path.is_relative_to(self.staging):
            return self.final / path.relative_to(self.staging)
        return path

    def holds(self, path: str | Path) -> bool:
        """True when `path` is the final folder or inside it (then stage with carry=True to keep it)."""
        return Path(os.path.abspath(path)).resolve().is_relative_to(self.final)

    def open(self) -> Path:
        """Create the staging folder (and the final folder's parents) and return it."""
        if self.staging is not None:
            return self.staging
        self.final.parent.mkdir(parents=True, exist_ok=True)
        staging = self.final.parent / f".{self.final.name[:_NAME_ROOM]}{STAGING_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        staging.mkdir()
        self.staging = staging
        if self.carry and self.final.is_dir():
            _link_tree(self.final, staging, skip=self.rewritten)
        return staging

    def commit(self) -> Path:
        """Put the staging folder in the final folder's place, whole, and remove the one it replaces."""
        if self.staging is None:
            raise RuntimeError("OutputFolder.commit() before open()")
        staging, self.staging = self.staging, None
        replaced = _swap_into_place(staging, self.final)
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
        return self.final

    def discard(self) -> None:
        """Remove the staging folder; the final folder stays as it was."""
        staging, self.staging = self.staging, None
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)

    def __enter__(self) -> "OutputFolder":
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None or self.keep_on_error:
            try:
                self.commit()
            except BaseException:
                self.discard()
                if exc_type is None:
                    raise
        else:
            self.discard()
        return False


def _swap_into_place(staging: Path, final: Path) -> Path | None:
    """Rename `staging` to `final`; returns where the folder it replaced now is (None when there was none).

    Retries until it wins: another run may create, replace or remove `final` in between.
    """
    while True:
        try:
            os.rename(staging, final)  # no final folder, or an empty one
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise UsageError(f"--out {final}: cannot move the output into place: {exc.strerror}") from None
        swapped = _exchange(staging, final)
        if swapped is True:
            return staging  # now holds the replaced folder
        if swapped is None:  # no atomic exchange here: move the old folder aside, then retry the rename
            aside = final.parent / f".{final.name[:_NAME_ROOM]}.diagnose-replaced-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                os.rename(final, aside)
            except FileNotFoundError:
                continue
            shutil.rmtree(aside, ignore_errors=True)
        # swapped is False: `final` vanished between the two calls; try the plain rename again


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool | None:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE): True done, False `b` is gone, None unsupported."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return None
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT:
        return False
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
        return None
    raise UsageError(f"--out {b}: cannot move the output into place: {os.strerror(err)}")


def _renameat2():
    """libc's renameat2, when this platform has one."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _link_tree(source: Path, target: Path, skip: frozenset[str]) -> None:
    """Fill `target` with hard links to the files under `source` (copies where a link is refused), except
    the top-level names in `skip` and other runs' staging folders."""
    for name in os.listdir(source):
        if name in skip or STAGING_MARK in name:
            continue
        src, dst = source / name, target / name
        mode = os.lstat(src).st_mode
        if stat.S_ISLNK(mode):
            os.symlink(os.readlink(src), dst)
        elif stat.S_ISDIR(mode):
            dst.mkdir()
            _link_tree(src, dst, frozenset())
        elif stat.S_ISREG(mode):
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
