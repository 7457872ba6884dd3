"""Decode a large trace's events on several cores at once.

Decoding is CPU-bound Python (msgspec builds one Struct per event, and frames.FrameBuilder reads
them back), so threads would not help. On Linux a large trace is instead split into contiguous
shares of its chunks: forked child processes each decode a share of the bytes they inherit
(nothing is copied to them), bucket it into compact columns, and stream those back pickled; the
parent decodes the first share meanwhile and appends the others' columns in file order, so the
frames come out exactly as a single process would build them. Anything unexpected in a child
(a cut between chunks that does not decode, an error, a crash) makes the parent decode the
whole trace itself instead.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys

from diagnose.trace.frames import FrameBuilder
from diagnose.trace.kineto import Decoded

MIN_BYTES = 32 << 20
MAX_PROCESSES = 4


class _Failed(Exception):
    """A share could not be decoded by its process: decode everything in this one."""


def build(decoded: Decoded) -> FrameBuilder:
    """Bucket every event of `decoded` into a FrameBuilder, on several cores when it pays."""
    processes = _processes(decoded)
    if processes > 1:
        try:
            return _parallel(decoded, processes)
        except _Failed:
            pass
    builder = FrameBuilder()
    for chunk in decoded.chunks():
        builder.add(chunk)
    return builder


def _processes(decoded: Decoded) -> int:
    """How many processes to decode with: 1 unless the trace is large and fork is available."""
    pieces = decoded.pieces()
    if not sys.platform.startswith("linux") or len(pieces) < 2 or pieces[-1][1] < MIN_BYTES:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(MAX_PROCESSES, cores, len(pieces)))


def _shares(pieces: list[tuple[int, int]], processes: int) -> list[tuple[int, int]]:
    """Contiguous (first, stop) ranges of piece indices holding about equal numbers of bytes."""
    total = pieces[-1][1]
    bounds, k = [0], 0
    for i in range(1, processes):
        while k < len(pieces) and pieces[k][1] < total * i / processes:
            k += 1
        bounds.append(max(bounds[-1], min(k + 1, len(pieces))))
    bounds.append(len(pieces))
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _parallel(decoded: Decoded, processes: int) -> FrameBuilder:
    shares = _shares(decoded.pieces(), processes)
    children = []  # (pid, read end of its pipe)
    try:
        for first, stop in shares[1:]:
            children.append(_fork(decoded, first, stop))
        mine = decoded.share()
        builder = FrameBuilder()
        try:
            for chunk in mine.chunks(*shares[0]):
                builder.add(chunk)
        except Exception as exc:  # a cut the splitter got wrong at a share's edge
            raise _Failed() from exc
        results = [(mine.kept, mine.dropped, mine.warnings)]
        while children:
            pid, fd = children[0]
            payload = _receive(fd)
            children.pop(0)
            _reap(pid)
            if payload is None:
                raise _Failed()
            columns, bad, kept, dropped, warnings = payload
            other = FrameBuilder()
            other.columns, other.bad = columns, bad
            builder.merge(other)
            results.append((kept, dropped, warnings))
    finally:
        for pid, fd in children:
            _stop(pid, fd)
    for kept, dropped, warnings in results:
        decoded.absorb(kept, dropped, warnings)
    return builder


def _fork(decoded: Decoded, first: int, stop: int) -> tuple[int, int]:
    """Start a child that decodes pieces[first:stop] and writes its columns to a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    code = 1
    try:
        os.close(read)
        part = decoded.share()
        builder = FrameBuilder()
        for chunk in part.chunks(first, stop):
            builder.add(chunk)
        with os.fdopen(write, "wb") as out:
            pickle.dump((builder.columns, builder.bad, part.kept, part.dropped, part.warnings), out,
                        protocol=pickle.HIGHEST_PROTOCOL)
        code = 0
    except BaseException:  # noqa: BLE001 - a child must never return into the caller's code
        pass
    finally:
        os._exit(code)


def _receive(fd: int):
    """The child's pickled columns, or None when it failed before sending them all."""
    try:
        with os.fdopen(fd, "rb") as pipe:
            return pickle.load(pipe)
    except (EOFError, pickle.UnpicklingError, OSError, ValueError):
        return None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _stop(pid: int, fd: int) -> None:
    """End a child that is no longer wanted, and free its pipe."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)
    try:
        os.close(fd)
    except OSError:
        pass
