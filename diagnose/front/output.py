"""The output folder of a run (`--out`): written whole or not at all, and only ever over what diagnose wrote.

A run's files (a capture's trace.json.gz, meta.json and workload.log; findings.json and
report.html; a sweep's point folders) are written into a staging folder beside the final one,
`.NAME.diagnose-staging-PID-RANDOM`, on the same filesystem, and renamed into place at the end.
So:

- two runs writing the same `--out` at once never mix: the last to finish wins, whole;
- a run that crashes or is interrupted leaves the previous folder as it was; a staging folder
  left by a run that was killed outright (SIGKILL) is removed by the next run into the same place;
- readers never see a half-written folder: on Linux the new folder takes the old one's place in
  one step (renameat2 RENAME_EXCHANGE); elsewhere the old folder is moved aside first, so for a
  moment there is none.

Every committed folder holds `diagnose-output.json` (MANIFEST): the version that wrote it and
every file it wrote. Only a folder that is empty or holds that manifest is ever replaced, and
what it holds beyond the manifest's list (a file the user added) is carried into the new folder,
so replacing removes only what diagnose wrote. `--out` itself may not be a symbolic link, nor be,
hold or lie inside any input of the run (`inputs`). Symbolic links in the staging folder (which
only a workload could have planted) are dropped before the commit, never followed.

`check_out_path` validates `--out` before anything runs: an existing file, a path under a file,
a device such as /dev/null, a symbolic link, a name too long for the filesystem, a folder that
cannot be written are a UsageError (exit 2, one line).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import stat
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal

from diagnose.base.errors import UsageError
from diagnose.base.safe_files import write_new
from diagnose.base.version import __version__

if TYPE_CHECKING:
    from diagnose.front.target import Target

STAGING_MARK = ".diagnose-staging-"
REPLACED_MARK = ".diagnose-replaced-"
MANIFEST = "diagnose-output.json"
MANIFEST_SCHEMA = "diagnose.front.output/1"

_NAME_ROOM = 100  # bytes of the final name kept in the staging name (names are limited to 255 bytes)
_NAME_MAX = 255
_MANIFEST_MAX_BYTES = 16 << 20


def check_out_path(path: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """The absolute path of the output folder `path`, or a UsageError saying in one line why it cannot be one.

    Refused: a symbolic link, an existing file or device (/dev/null), a path under a file, the
    filesystem root, the current folder or one above it, a name longer than the filesystem allows,
    a folder (or the nearest existing folder above it) that this process cannot create files in
    (permissions, a read-only filesystem, an immutable folder), an existing folder that diagnose did
    not write (no manifest; replacing it would delete the user's files), and a folder that is, holds
    or lies inside one of `inputs` (a trace, capture, rank or sweep folder, either side of a diff).
    Nothing is created; the probes leave no trace.
    """
    shown = str(path)
    final = Path(os.path.abspath(Path(path).expanduser()))
    if os.path.islink(final):
        raise UsageError(f"--out {shown}: is a symbolic link; give the folder itself (diagnose writes through no link)")
    if final.parent == final:
        raise UsageError(f"--out {shown}: the filesystem root cannot be an output folder")
    too_long = [part for part in final.parts if len(os.fsencode(part)) > _NAME_MAX]
    if too_long:
        raise UsageError(f"--out {shown}: a name is longer than {_NAME_MAX} bytes ({len(os.fsencode(too_long[0]))})")
    real = Path(os.path.realpath(final))
    if Path.cwd().resolve().is_relative_to(real):
        raise UsageError(
            f"--out {shown}: is the current folder or holds it, and the output folder is replaced "
            "whole: name a folder inside it"
        )
    _refuse_inputs(real, inputs, shown)
    if os.path.lexists(final) and not final.is_dir():
        kind = "a device or special file" if final.exists() and not final.is_file() else "a file"
        raise UsageError(f"--out {shown}: is {kind}, not a folder")
    existing = _nearest_existing(final)
    if not existing.is_dir():
        if os.path.islink(existing) and not existing.exists():
            raise UsageError(f"--out {shown}: {existing} is a symbolic link that loops or leads nowhere")
        raise UsageError(f"--out {shown}: {existing} is a file, so no folder can be made under it")
    if final.is_dir():
        _probe_writable(final, shown)
        if not replaceable(final):
            raise UsageError(
                f"--out {shown}: holds files diagnose did not write (no {MANIFEST}), and the "
                "output folder is replaced: give a new or empty folder"
            )
    _probe_writable(final.parent if final.parent.is_dir() else existing, shown)
    return final


def _refuse_inputs(real: Path, inputs: Iterable[str | Path], shown: str) -> None:
    """UsageError when the output folder is, holds or lies inside an input: replacing it would destroy the input."""
    for item in inputs:
        if item is None or str(item) == "-":
            continue
        source = Path(os.path.realpath(Path(item).expanduser()))
        if source == real or source.is_relative_to(real) or real.is_relative_to(source):
            relation = "is" if source == real else ("holds" if source.is_relative_to(real) else "lies inside")
            raise UsageError(
                f"--out {shown}: {relation} the input {item}, which replacing the output folder "
                "would destroy: give another folder"
            )


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


def replaceable(folder: Path) -> bool:
    """True when `folder` may be replaced: it is empty, or holds a manifest that diagnose wrote."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return not names or read_manifest(folder) is not None


def read_manifest(folder: Path) -> list[str] | None:
    """The relative paths listed in `folder`'s manifest, or None when it has none (or not one of diagnose's)."""
    path = Path(folder) / MANIFEST
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_size > _MANIFEST_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA or not isinstance(data.get("files"), list):
        return None
    return [name for name in data["files"] if isinstance(name, str)]


def own_files(folder: Path) -> list[str]:
    """The relative paths of every regular file under `folder` but its manifest, links not followed."""
    return sorted(p.relative_to(folder).as_posix() for p in _regular_files(folder) if p != Path(folder) / MANIFEST)


def write_manifest(folder: Path, files: list[str]) -> None:
    """Write `folder`'s manifest, listing `files` (relative paths) as what diagnose wrote there."""
    body = {"schema": MANIFEST_SCHEMA, "written_by": f"diagnose {__version__}", "files": files}
    write_new(folder / MANIFEST, json.dumps(body, indent=1).encode())


def _regular_files(folder: Path) -> Iterator[Path]:
    """Every regular file under `folder`, links not followed."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            path = Path(root) / name
            if stat.S_ISREG(os.lstat(path).st_mode):
                yield path


def _drop_links(folder: Path) -> list[str]:
    """Remove every symbolic link under `folder` (diagnose writes none); returns their relative paths."""
    dropped = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            if os.path.islink(path):
                os.unlink(path)
                dropped.append(str(path.relative_to(folder)))
    return dropped


def _staging_prefix(final: Path) -> str:
    """The start of every staging or moved-aside folder name of `final` (its name cut to `_NAME_ROOM` bytes)."""
    cut = os.fsencode(final.name)[:_NAME_ROOM].decode(errors="ignore")
    return f".{cut}"


def _clean_stale(final: Path) -> None:
    """Remove staging and moved-aside folders of `final` left by runs that no longer exist (killed outright)."""
    prefix = _staging_prefix(final)
    try:
        names = os.listdir(final.parent)
    except OSError:
        return
    for name in names:
        for mark in (STAGING_MARK, REPLACED_MARK):
            if not name.startswith(prefix + mark):
                continue
            pid = name[len(prefix + mark) :].split("-", 1)[0]
            path = final.parent / name
            if pid.isdigit() and not _alive(int(pid)) and stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    """True while process `pid` exists (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class OutputFolder:
    """Stages a run's outputs beside the final folder and renames them into place at the end.

        with OutputFolder(out, inputs=[trace]) as folder:   # validated here (UsageError), staged on enter
            write_everything_into(folder.path)              # the staging folder
        # out now holds what was written, its manifest, and whatever the user had added to it

    Leaving the block normally commits; an exception discards the staging folder and leaves the
    previous `out` untouched, unless `keep_on_error` was set True (e.g. once a capture is
    complete, so that what it recorded survives a failure of the analysis after it). Even then an
    interrupt (Ctrl-C, SIGTERM) and a failed write (a full disk, a read-only filesystem) discard it:
    the previous folder is left as it was, as README promises.
    """

    def __init__(self, final: str | Path, inputs: Iterable[str | Path] = ()):
        self.inputs = [i for i in inputs if i is not None]
        self.final = check_out_path(final, inputs=self.inputs)
        self.keep_on_error = False
        self.staging: Path | None = None
        self.dropped_links: list[str] = []

    @property
    def path(self) -> Path:
        """Where to write now: the staging folder while open, the final folder once committed."""
        return self.staging if self.staging is not None else self.final

    def public(self, path: str | os.PathLike[str]) -> Path:
        """Where `path` (inside the staging folder) will be once committed: for messages and reports."""
        path = Path(path)
        if self.staging is not None and path.is_relative_to(self.staging):
            return self.final / path.relative_to(self.staging)
        return path

    def open(self) -> Path:
        """Create the staging folder (and the final folder's parents) and return it; stale staging
        folders of runs that were killed are removed first."""
        if self.staging is not None:
            return self.staging
        try:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            _clean_stale(self.final)
            staging = (
                self.final.parent / f"{_staging_prefix(self.final)}{STAGING_MARK}{os.getpid()}-{secrets.token_hex(4)}"
            )
            staging.mkdir()
        except OSError as exc:
            raise UsageError(f"--out {self.final}: cannot write there: {exc.strerror or exc}") from None
        self.staging = staging
        return staging

    def commit(self) -> Path:
        """Put the staging folder in the final folder's place, with its manifest and the files the user
        had added to the folder it replaces; then remove what diagnose wrote there before."""
        if self.staging is None:
            raise RuntimeError("OutputFolder.commit() before open()")
        staging = self.staging
        try:
            self.dropped_links = _drop_links(staging)
            replaced = _swap_into_place(staging, self.final, own_files(staging))
        except OSError as exc:
            self.discard()
            raise UsageError(
                f"--out {self.final}: cannot write the output: {exc.strerror or exc}; "
                "the previous folder is left as it was"
            ) from None
        except BaseException:
            self.discard()
            raise
        self.staging = None
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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if isinstance(exc, OSError):  # name the file where it was going, not its staging path
            for attribute in ("filename", "filename2"):
                name = getattr(exc, attribute)
                if isinstance(name, (str, os.PathLike)):
                    setattr(exc, attribute, str(self.public(name)))
        keep = exc_type is None or (
            self.keep_on_error and issubclass(exc_type, Exception) and not issubclass(exc_type, OSError)
        )
        if keep:
            self.commit()
        else:
            self.discard()
        return False


def _swap_into_place(staging: Path, final: Path, own: list[str]) -> Path | None:
    """Rename `staging` to `final`; returns where the folder it replaced now is (None when there was none).

    `own` lists what diagnose wrote into `staging`; the manifest lists it. The files of the replaced
    folder that its manifest does not list are linked into `staging` first (and not listed). Retries until it wins: another run may create, replace or remove `final` in between; a
    folder that appears there without a manifest is never replaced (UsageError).
    """
    write_manifest(staging, own)
    while True:
        try:
            os.rename(staging, final)  # no final folder, or an empty one
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if os.path.islink(final) or not replaceable(final):
            if not os.path.lexists(final):
                continue  # another run moved it aside meanwhile: the rename may win now
            raise UsageError(
                f"--out {final}: now holds files diagnose did not write; the output is not put in its place"
            )
        carried = _carry_unlisted(final, staging)
        if carried:
            write_manifest(staging, sorted(set(own) - carried))
        swapped = _exchange(staging, final)
        if swapped is True:
            return staging  # now holds the replaced folder
        if swapped is None:  # no atomic exchange here: move the old folder aside, then retry the rename
            aside = final.parent / f"{_staging_prefix(final)}{REPLACED_MARK}{os.getpid()}-{secrets.token_hex(4)}"
            try:
                os.rename(final, aside)
            except FileNotFoundError:
                continue
            shutil.rmtree(aside, ignore_errors=True)
        # swapped is False: `final` vanished between the two calls; try the plain rename again


def _carry_unlisted(final: Path, staging: Path) -> set[str]:
    """Link into `staging` what `final` holds beyond its manifest's list (the user's own files), so
    that replacing `final` removes only what diagnose wrote. Where the new output has a file of the
    same name, the user's is kept and diagnose's new one is dropped. Returns the carried paths."""
    carried: set[str] = set()
    listed = set(read_manifest(final) or ())
    listed.add(MANIFEST)
    for root, dirs, files in os.walk(final, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(Path(root) / d)]:
            source = Path(root) / name
            relative = source.relative_to(final).as_posix()
            if relative in listed or STAGING_MARK in relative or REPLACED_MARK in relative:
                continue
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                os.unlink(target) if not target.is_dir() or target.is_symlink() else shutil.rmtree(target)
            _link_or_copy(source, target)
            carried.add(relative)
    return carried


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link to `source` at `target` (a copy where links are refused; a symbolic link as itself)."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
        return
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


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


def _renameat2() -> Any:
    """libc's renameat2, when this platform has one."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def default_out(target: Target) -> Path:
    """diagnose-out/<name of the target> in the current folder."""
    if str(target.path) == "-":
        return Path("diagnose-out") / "stdin"
    name = target.path.name
    for suffix in (".gz", ".json", ".py"):
        name = name.removesuffix(suffix)
    if target.function:
        name = f"{name}-{target.function}"
    return Path("diagnose-out") / (name or "trace")
