"""Decode a large trace's events on several cores at once.

Decoding is CPU-bound Python (msgspec builds one Struct per event, and frames.FrameBuilder reads
them back), so threads would not help. On Linux a large trace is instead cut into blocks of
consecutive chunks, and forked child processes decode blocks of the bytes they inherit (nothing
is copied to them) alongside the parent. Blocks are handed out as tickets read from one pipe, so
a process that runs slower simply takes fewer of them. Each block is bucketed into columns and
turned into arrays where it was decoded; children stream theirs back pickled, and the parent
appends every block's columns in file order, so the frames come out exactly as a single process
would build them. Anything unexpected in a child (a cut between chunks that does not decode, an
error, a crash) makes the parent decode the whole trace itself instead.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import IO, Callable

from diagnose.trace.frames import FrameBuilder
from diagnose.trace.kineto import Decoded

MIN_BYTES = 32 << 20
MAX_PROCESSES = 4
BLOCKS_PER_PROCESS = 32
TICKET = 4  # bytes per block number in the ticket pipe
PROGRESS_EVERY = 16  # pieces decoded on one core between progress reports
ProgressCallback = Callable[[dict], None]  # called with {"phase": "decode", "done": n, "total": N}


class _Failed(Exception):
    """A block could not be decoded by its process: decode everything in this one."""


def build(decoded: Decoded, on_progress: ProgressCallback | None = None) -> FrameBuilder:
    """Bucket every event of `decoded` into a FrameBuilder, on several cores when it pays.

    `on_progress` (optional) is called with {"phase": "decode", "done": n, "total": N} as the
    work advances: blocks handed out, or pieces decoded on one core.
    """
    report = on_progress or (lambda event: None)
    processes = _processes(decoded)
    if processes > 1:
        try:
            return _parallel(decoded, processes, report)
        except _Failed:
            pass
    builder = FrameBuilder()
    total = max(len(decoded.pieces()), 1)
    reported = -PROGRESS_EVERY
    for chunk in decoded.chunks():  # (not enumerate: its reused tuple would hold each chunk until the next)
        if decoded.pieces_done - reported >= PROGRESS_EVERY:
            reported = decoded.pieces_done
            report({"phase": "decode", "done": reported, "total": total})
        builder.add(chunk)
        del chunk  # (see _decode_blocks)
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


def _shares(pieces: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """Contiguous (first, stop) ranges of piece indices holding about equal numbers of bytes."""
    total = pieces[-1][1]
    bounds, k = [0], 0
    for i in range(1, n):
        while k < len(pieces) and pieces[k][1] < total * i / n:
            k += 1
        bounds.append(max(bounds[-1], min(k + 1, len(pieces))))
    bounds.append(len(pieces))
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _parallel(decoded: Decoded, processes: int, report: ProgressCallback) -> FrameBuilder:
    blocks = _shares(decoded.pieces(), processes * BLOCKS_PER_PROCESS)
    tickets, write = os.pipe()
    try:
        os.write(write, b"".join(i.to_bytes(TICKET, "little") for i in range(len(blocks))))
    finally:
        os.close(write)
    children = []  # (pid, read end of its pipe)
    done: list = []
    try:
        for _ in range(processes - 1):
            children.append(_fork(decoded, blocks, tickets))
        try:
            done += _decode_blocks(decoded, blocks, tickets, report)
        except Exception as exc:  # a cut the splitter got wrong at a block's edge
            raise _Failed() from exc
        while children:
            pid, fd = children[0]
            payload = _receive(fd)
            children.pop(0)
            _reap(pid)
            if payload is None:
                raise _Failed()
            done += payload
    finally:
        os.close(tickets)
        for pid, fd in children:
            _stop(pid, fd)
    done.sort(key=lambda block: block[0])
    if [block[0] for block in done] != list(range(len(blocks))):
        raise _Failed()
    builders = [FrameBuilder.compacted(columns, bad) for _, columns, bad, _, _, _ in done]
    builder = builders[0]
    builder.merge(*builders[1:], later=True)  # joined in `finish`, once the caller has let the file go
    for _, _, _, kept, dropped, warnings in done:
        decoded.absorb(kept, dropped, warnings)
    return builder


def _decode_blocks(
    decoded: Decoded, blocks: list[tuple[int, int]], tickets: int, report: ProgressCallback | None = None
) -> list[tuple]:
    """Decode the blocks whose tickets this process draws, until none is left; for each,
    (block number, compacted columns, bad events, kept, dropped, warnings). Tickets are drawn in
    order, so the number drawn tells how far all processes together have got (`report`)."""
    out: list[tuple] = []
    caches = None
    while True:
        ticket = os.read(tickets, TICKET)
        if len(ticket) < TICKET:
            return out
        i = int.from_bytes(ticket, "little")
        if report:
            report({"phase": "decode", "done": i, "total": len(blocks)})
        part = decoded.share()
        builder = FrameBuilder(like=caches)
        for chunk in part.chunks(*blocks[i]):
            builder.add(chunk)
            del chunk  # freed now, while hot in the cache, rather than once the next chunk is decoded
        builder.compact()
        caches = builder
        out.append((i, builder.columns, builder.bad, part.kept, part.dropped, part.warnings))


def _fork(decoded: Decoded, blocks: list[tuple[int, int]], tickets: int) -> tuple[int, int]:
    """Start a child that decodes blocks while tickets last and writes their columns to a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    code = 1
    try:
        os.close(read)
        done = _decode_blocks(decoded, blocks, tickets)
        with os.fdopen(write, "wb") as out:
            _send(done, out)
        code = 0
    except BaseException:  # noqa: BLE001 - a child must never return into the caller's code
        pass
    finally:
        os._exit(code)


def _send(done: list[tuple], out: IO[bytes]) -> None:
    """Write a child's blocks to its pipe one at a time, each let go once written, so that its
    columns are not held in the child and in the parent at once: first the code tables of the
    coded columns (shared by many blocks) and the block count, then each block with its tables
    named by their place in that list."""
    tables: dict[int, tuple[int, list]] = {}
    for block in done:
        for columns in block[1].values():
            for column in columns.values():
                if column.table is not None and id(column.table) not in tables:
                    tables[id(column.table)] = (len(tables), column.table)
    pickle.dump([table for _, table in tables.values()], out, protocol=pickle.HIGHEST_PROTOCOL)
    pickle.dump(len(done), out, protocol=pickle.HIGHEST_PROTOCOL)
    while done:
        i, columns, *rest = done.pop(0)
        columns = {
            key: {col: c if c.table is None else c._replace(table=tables[id(c.table)][0]) for col, c in cols.items()}
            for key, cols in columns.items()
        }
        pickle.dump((i, columns, *rest), out, protocol=pickle.HIGHEST_PROTOCOL)
        del columns, rest


def _receive(fd: int) -> list[tuple] | None:
    """The child's blocks (as _send wrote them, with their code tables back in place), or None
    when it failed before sending them all."""
    try:
        with os.fdopen(fd, "rb") as pipe:
            tables = pickle.load(pipe)
            out = []
            for _ in range(pickle.load(pipe)):
                i, columns, *rest = pickle.load(pipe)
                columns = {
                    key: {col: c if c.table is None else c._replace(table=tables[c.table]) for col, c in cols.items()}
                    for key, cols in columns.items()
                }
                out.append((i, columns, *rest))
            return out
    except (EOFError, pickle.UnpicklingError, OSError, ValueError, IndexError, TypeError, AttributeError):
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
