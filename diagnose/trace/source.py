"""Read the bytes of a trace the user named, safely: what may be opened, and how much it may inflate to.

**What is opened.** A path is looked at with `stat` before anything opens it: only a regular file
is read. A FIFO (opening one blocks until a writer comes), a character or block device
(`/dev/zero`, `/dev/urandom` never end), a socket or anything else is an InputError. Standard
input is the exception: the target `-`, or a path that is standard input itself (`/dev/stdin`,
`/proc/self/fd/0`), or an already open pipe named `/dev/fd/N` (a shell's `<(zcat t.json.gz)`),
is read from its file descriptor; a terminal or a device there is an InputError too.

**How much.** A plain regular file is read into one buffer of its size (never memory-mapped: a
mapped file that another process truncates kills the reader with SIGBUS); gzip (found by its
magic number in the bytes already read, never by opening again, so pipes work) is inflated a
block at a time into one buffer, stopping with an InputError as soon as the inflated size passes
the ceiling:

    ceiling = min(MAX_TRACE_BYTES, max(INFLATE_FLOOR_BYTES, INFLATE_RATIO × compressed bytes))

INFLATE_RATIO is 100: the bundled captures and peer traces inflate 7.5× to 27×, while a
decompression bomb inflates up to ~1,000× (1 MB of gzip → 1 GB of whitespace stops at 100 MB).
INFLATE_FLOOR_BYTES (64 MiB) lets small, repetitive traces through whatever their ratio.
MAX_TRACE_BYTES (4 GiB) is the absolute cap on any trace: the inflated size, a plain file's size,
and what standard input delivers; the project's 1 GB benchmark trace loads under it. From a
pipe the compressed size is only known as it is read, so the ratio is checked against what has
been read so far. `max_bytes` (the command's `--max-trace-bytes`) replaces the whole rule with one
number, for trusted traces above the cap.

**While it is read.** A regular file's size and modification time are taken before and after it
is read: a file that shrinks, grows or is rewritten meanwhile (a trace still being written, a
capture being replaced) is an InputError, never a torn read analysed as if whole.

**What it starts with.** The first MiB (inflated, for gzip) is looked at before the rest is read
or a buffer of the file's size is made: a control byte that JSON never holds raw (a file of NULs,
any binary, /proc/self/environ), bytes that are not UTF-8, or a first character that starts no
JSON value after whitespace is an InputError there, so a 3 GB file of NULs costs one MiB of reading.

A UTF-8 byte-order mark at the start is skipped.
"""

from __future__ import annotations

import codecs
import io
import os
import re
import stat
import zlib
from pathlib import Path
from typing import Protocol

from diagnose.base.errors import InputError

MAX_TRACE_BYTES = 4 << 30
INFLATE_RATIO = 100
INFLATE_FLOOR_BYTES = 64 << 20
READ_BYTES = 1 << 20  # bytes read from a file or pipe at a time
FILE_BLOCK_BYTES = 16 << 20  # bytes of a plain regular file read at a time, straight into its buffer
INFLATE_STEP = 4 << 20  # inflated bytes produced per step, so the ceiling is checked often
SNIFF_BYTES = 1 << 20  # the first bytes of a trace (inflated) looked at before the rest is read
GZIP_MAGIC = b"\x1f\x8b"
JSON_BLANK = b" \t\n\r"
_JSON_STARTS = b'{["-0123456789tfn'  # what a JSON document may start with (the decoder names what else is wrong)
_NOT_JSON_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # control bytes but JSON's whitespace
UTF8_BOM = b"\xef\xbb\xbf"
STDIN = "-"
_FD_PATH = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")


def trace_bytes(path: Path, max_bytes: int | None = None) -> bytearray:
    """The trace's bytes (gunzipped when gzip), as a buffer the JSON decoder reads (a bytearray or
    bytes). Raises InputError for anything that is not a readable regular file or standard input,
    for input past the ceiling, and for a file that changed while it was read (module docstring)."""
    fd = input_fd(path)
    if fd is not None:
        return _read_stream(fd, describe(path), max_bytes)
    _check_regular(path)
    try:
        with open(path, "rb", buffering=0) as f:
            before = os.fstat(f.fileno())
            head = _read_head(f, SNIFF_BYTES)
            if head[: len(GZIP_MAGIC)] == GZIP_MAGIC:
                data = _inflate(f, head, describe(path), max_bytes, compressed_size=before.st_size)
            else:
                check_json_start(head, describe(path), whole=len(head) < SNIFF_BYTES)
                _check_size(before.st_size, max_bytes, path)
                data = _read_file(f, head, before.st_size, path)
            _check_unchanged(before, os.fstat(f.fileno()), path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return _without_bom(data)


def head_bytes(path: Path, n: int = 64 << 10) -> bytes:
    """The first `n` bytes of the trace file `path`, inflated when gzip, to look at what it holds before
    deciding how to read it (a folder's files: one process's traces, or ranks); b"" for anything that is
    not a readable regular file or whose start does not inflate (the full read says why)."""
    try:
        _check_regular(path)
        with open(path, "rb", buffering=0) as f:
            head = _read_head(f, n)
            if head[: len(GZIP_MAGIC)] != GZIP_MAGIC:
                return head
            inflater, out, data = zlib.decompressobj(zlib.MAX_WBITS | 16), b"", head
            while data and len(out) < n and not inflater.eof:
                out += inflater.decompress(data, n - len(out))
                data = inflater.unconsumed_tail or _read_head(f, READ_BYTES)
            return out
    except (InputError, OSError, zlib.error):
        return b""


def _read_head(f: io.FileIO, n: int) -> bytes:
    """The first `n` bytes of the unbuffered file `f` (fewer only at its end)."""
    head = b""
    while len(head) < n:
        block = _read_block(f, n - len(head))
        if not block:
            break
        head += block
    return head


def check_json_start(data: bytes | bytearray, label: str, whole: bool) -> None:
    """InputError unless `data`, the first bytes of a trace (inflated, after a byte-order mark), can
    start a JSON document: no control byte that JSON never holds raw (a NUL, any binary), valid
    UTF-8, and after any whitespace a character that starts a JSON value. `whole` says `data` is
    the whole input (a short one may be blank; the empty-trace message is load.py's)."""
    window = bytes(data[:SNIFF_BYTES])
    if window.startswith(UTF8_BOM):
        window = window[len(UTF8_BOM) :]
    bad = _NOT_JSON_BYTE.search(window)
    if bad is not None:
        raise InputError(
            f"{label}: not a JSON trace (byte {bad.start():,} is 0x{window[bad.start()]:02x}, which JSON never "
            "holds: a binary file); give a kineto trace (.json or .json.gz)"
        )
    try:
        codecs.getincrementaldecoder("utf-8")().decode(window, final=whole)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{label}: not a JSON trace (byte {exc.start:,} is not UTF-8: a binary file); "
            "give a kineto trace (.json or .json.gz)"
        ) from None
    text = window.lstrip(JSON_BLANK)
    if text and text[:1] not in _JSON_STARTS:
        shown = text[:12].decode("utf-8", "replace")
        raise InputError(
            f"{label}: not a JSON trace (it starts with {shown!r}, a kineto trace with '{{'); "
            "give a kineto trace (.json or .json.gz)"
        )


def _read_block(f: io.FileIO, n: int) -> bytes:
    """Up to `n` bytes from the unbuffered file `f`."""
    return f.read(n)


def _read_into(f: io.FileIO, view: memoryview) -> int:
    """Read into `view` from the unbuffered file `f`; the bytes read (0 at the end of the file)."""
    return f.readinto(view)


def _read_file(f: io.FileIO, head: bytes, size: int, path: Path) -> bytearray:
    """The rest of a plain file of `size` bytes after `head`, read straight into one bytearray."""
    if len(head) > size:  # more than its size said: a file still growing, or a special file (/proc)
        raise InputError(_changed(path, size, len(head), "grew"))
    data = bytearray(size)
    view = memoryview(data)
    try:
        view[: len(head)] = head
        done = len(head)
        while done < size:
            n = _read_into(f, view[done : done + FILE_BLOCK_BYTES])
            if not n:
                raise InputError(_changed(path, size, done, "shrank"))
            done += n
    finally:
        view.release()
    if _read_block(f, 1):
        raise InputError(_changed(path, size, None, "grew"))
    return data


def _check_unchanged(before: os.stat_result, after: os.stat_result, path: Path) -> None:
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        how = (
            "shrank"
            if after.st_size < before.st_size
            else "grew"
            if after.st_size > before.st_size
            else "was rewritten"
        )
        raise InputError(_changed(path, before.st_size, after.st_size, how))


def _changed(path: Path, size: int, now: int | None, how: str) -> str:
    sizes = f"{size:,} bytes when opened" + (f", {now:,} after" if now is not None else "")
    return f"{path}: the file {how} while it was read ({sizes}): analyse it once whatever writes it has finished"


def check_present(path: Path) -> None:
    """InputError when `path` is not there (standard input and /dev/fd/N always are): said before anything
    heavier is imported, and again by the loader."""
    if input_fd(path) is None and not path.exists():
        raise InputError(f"{path}: no such file or folder")


def input_fd(path: Path) -> int | None:
    """The open file descriptor `path` stands for (`-`, /dev/stdin, /dev/fd/N of an open pipe), else None."""
    text = str(path)
    if text == STDIN:
        return 0
    match = _FD_PATH.match(text)
    if text == "/dev/stdin" or match:
        fd = int(match.group(1)) if match else 0
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except OSError:
            return None
    return None


def describe(path: Path) -> str:
    """How messages name `path`: "standard input" for `-`, else the path."""
    return "standard input" if str(path) == STDIN else str(path)


def _check_regular(path: Path) -> None:
    """InputError unless `path` is a regular file (checked without opening it)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        raise InputError(
            f"{path}: not a regular file ({_kind(mode)}); give a trace file, a capture folder, or - for standard input"
        )


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a file"


def _check_size(size: int, max_bytes: int | None, where: str | Path) -> None:
    limit = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    if size > limit:
        raise InputError(
            f"{where}: {size:,} bytes is more than the {limit:,}-byte limit on a trace "
            "(raise it with --max-trace-bytes)"
        )


def _read_stream(fd: int, label: str, max_bytes: int | None) -> bytearray:
    """Everything standard input (or another open pipe) delivers, inflated when it is gzip; bounded."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise InputError(f"{label}: cannot read ({exc.strerror or exc})") from None
    if os.isatty(fd):
        raise InputError(f"{label} is a terminal: pipe a trace into it (zcat trace.json.gz | diagnose -)")
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        raise InputError(f"{label}: not a pipe or a regular file ({_kind(mode)})")
    reader = _FdReader(fd, label)
    head = reader.read(len(GZIP_MAGIC))
    while len(head) < len(GZIP_MAGIC):  # a pipe may hand over one byte at a time
        more = reader.read(len(GZIP_MAGIC) - len(head))
        if not more:
            break
        head += more
    if head == GZIP_MAGIC:
        return _inflate(reader, head, label, max_bytes, compressed_size=None)
    limit = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    out = bytearray(head)
    sniffed = False
    while True:
        block = reader.read(READ_BYTES)
        if not block:
            break
        out += block
        if not sniffed and len(out) >= SNIFF_BYTES:
            check_json_start(out, label, whole=False)
            sniffed = True
        if len(out) > limit:
            _check_size(len(out), max_bytes, label)
    if not sniffed:
        check_json_start(out, label, whole=True)
    return _without_bom(out)


class _Reader(Protocol):
    """What `_inflate` reads from: an unbuffered file, or a pipe (`_FdReader`)."""

    def read(self, n: int, /) -> bytes: ...


class _FdReader:
    """`read(n)` over a raw file descriptor, with OSError turned into InputError."""

    def __init__(self, fd: int, label: str):
        self.fd, self.label = fd, label

    def read(self, n: int) -> bytes:
        try:
            return os.read(self.fd, n)
        except OSError as exc:
            raise InputError(f"{self.label}: cannot read ({exc.strerror or exc})") from None


def ceiling(compressed: int, max_bytes: int | None = None) -> int:
    """The most bytes `compressed` bytes of gzip may inflate to (module docstring)."""
    if max_bytes is not None:
        return max_bytes
    return min(MAX_TRACE_BYTES, max(INFLATE_FLOOR_BYTES, INFLATE_RATIO * compressed))


def _inflate(f: _Reader, head: bytes, label: str, max_bytes: int | None, compressed_size: int | None) -> bytearray:
    """Inflate gzip (every member; zero padding after the last is allowed) from `head` and then
    `f.read`, a step at a time, stopping at the ceiling."""
    out = bytearray()
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    pending, read, full, sniffed = head, len(head), False, False
    try:
        while True:
            if inflater.eof and pending:
                pending = pending.lstrip(b"\0")
                if pending:  # another gzip member follows
                    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
            if (pending or full) and not inflater.eof:
                step = inflater.decompress(pending, INFLATE_STEP)
                out += step
                if not sniffed and len(out) >= SNIFF_BYTES:
                    check_json_start(out, label, whole=False)
                    sniffed = True
                limit = ceiling(read if compressed_size is None else compressed_size, max_bytes)
                if len(out) > limit:
                    raise InputError(
                        _too_big(label, limit, read if compressed_size is None else compressed_size, max_bytes)
                    )
                pending = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                full = len(step) == INFLATE_STEP  # zlib may hold more output for the input it took
                if pending or full:
                    continue
            block = f.read(READ_BYTES)
            if not block:
                break
            read += len(block)
            pending = block
    except zlib.error as exc:
        raise InputError(f"{label}: truncated or corrupt gzip data ({exc})") from None
    if not inflater.eof:
        raise InputError(f"{label}: truncated or corrupt gzip data (it ends before the end of the stream)")
    if not sniffed:
        check_json_start(out, label, whole=True)
    return _without_bom(out)


def _too_big(label: str, limit: int, compressed: int, max_bytes: int | None) -> str:
    if max_bytes is not None:
        rule = f"the --max-trace-bytes limit of {limit:,} bytes"
    else:
        rule = (
            f"{limit:,} bytes, the ceiling for {compressed:,} bytes of gzip ({INFLATE_RATIO}× its size, "
            f"at least {INFLATE_FLOOR_BYTES >> 20} MiB, at most {MAX_TRACE_BYTES >> 30} GiB)"
        )
    return (
        f"{label}: inflates to more than {rule}: a decompression bomb, or a trace too large "
        "(raise the limit with --max-trace-bytes)"
    )


def _without_bom(data: bytearray) -> bytearray:
    if data[: len(UTF8_BOM)] == UTF8_BOM:
        del data[: len(UTF8_BOM)]
    return data
