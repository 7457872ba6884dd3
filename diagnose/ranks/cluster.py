"""Where a rank folder's ranks are measured: the local process pool (analyse.py), or a Dask cluster.

    with open_engine("local:2") as engine:         # or "tcp://scheduler:8786", or DASK_SCHEDULER_ADDRESS
        print(engine.dashboard_link)
        diagnosis = analyse_ranks(folder, engine=engine)

An engine does the two things analyse_ranks hands out (the RankEngine protocol): `map_ranks` runs
the per-rank function (analyse.analyse_rank, the one the local pool runs) on every rank, one task a
rank, and returns each rank's compact result (its profile, its single-rank findings, its capture's
status; or the line that says why it could not be read); `reference` runs the reference rank's full
rules with the cross-rank view (analyse.reference_diagnosis). The driver holds only those results,
never a trace: the traces are read by the workers, from a path they can all read.

A task whose worker dies (killed, out of memory) is run again on another worker by Dask; a rank that
kills `allowed-failures` workers in a row (Dask's setting, 3 by default) is named as a failed rank.
Ctrl-C cancels every task still pending and closes the client (and the LocalCluster, whose worker
processes end with it); a task already running on a remote worker runs to its end there, its result
dropped. Dask (`distributed`) is optional: pip install 'diagnose-gpu[cluster]'.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from diagnose.base.errors import UsageError
from diagnose.base.version import __version__

if TYPE_CHECKING:
    from distributed import Client

ENV_ADDRESS = "DASK_SCHEDULER_ADDRESS"  # as Nsight Systems' recipes and dask.distributed's Client read it
RETRIES = 2  # a rank task that raises (not an unreadable trace, which is a result) is tried this often again
CONNECT_TIMEOUT_S = 20
WORKERS_TIMEOUT_S = 60
INSTALL = "pip install 'diagnose-gpu[cluster]'"


class RankEngine(Protocol):
    """What analyse_ranks asks of an engine other than its own local pool."""

    def map_ranks(self, sources: list, config, max_bytes: int | None, report) -> list[dict]:
        """analyse_rank's result for every source, in their order; `report` gets progress events."""
        ...

    def reference(self, path: str, config, ranks, max_bytes: int | None):
        """The Diagnosis of the reference rank's trace, every rule run with `ranks` (a RankSet)."""
        ...


def cluster_address(given: str | None) -> str | None:
    """The cluster a rank folder is analysed on: `--cluster`, else DASK_SCHEDULER_ADDRESS, else None
    (the local pool)."""
    return given or os.environ.get(ENV_ADDRESS) or None


def open_engine(address: str) -> "DaskEngine":
    """A DaskEngine for `address` (`local`, `local:N` or a scheduler address); UsageError, one line,
    when Dask is not installed or the spelling is wrong. Use it as a context manager."""
    if importlib.util.find_spec("distributed") is None:
        raise UsageError(f"--cluster {address}: Dask is not installed in this Python ({INSTALL})")
    return DaskEngine(address)


def local_workers(address: str) -> int | None:
    """N of `local:N` (None for a plain `local`: the cores this process may use, at most four), or
    UsageError when N is not a whole number of at least 1."""
    _, _, count = address.partition(":")
    if not count:
        return None
    if not count.isdigit() or int(count) < 1:
        raise UsageError(f"--cluster {address}: local:N needs N, a number of worker processes, of at least 1")
    return int(count)


def dask_setup(worker) -> None:
    """Dask's preload hook, in each LocalCluster worker process: Ctrl-C at a terminal reaches the
    whole process group, and the driver alone answers it (it cancels the tasks and closes the
    cluster), so a worker ignores SIGINT rather than print a traceback of its own."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_version() -> str:
    """The diagnose version a worker runs (checked against the driver's when the client connects)."""
    from diagnose.base.version import __version__ as version

    return version


class DaskEngine:
    """Ranks as Dask tasks: on a LocalCluster (`local[:N]`, N worker processes of one thread each) or
    on the cluster whose scheduler listens at `address`."""

    def __init__(self, address: str, task=None, retries: int = RETRIES):
        self.address = address
        self.local = address == "local" or address.startswith("local:")
        self.workers = local_workers(address) if self.local else None
        self.task = task  # the per-rank function; None: analyse.analyse_rank (tests put a fault before it)
        self.retries = retries
        self.client: Client | None = None
        self.cluster = None

    def __enter__(self) -> "DaskEngine":
        from distributed import Client

        try:
            if self.local:
                self.cluster = self._local_cluster()
                self.client = Client(self.cluster)
            else:
                self.client = Client(self.address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            self.close()
            raise UsageError(
                f"--cluster {self.address}: cannot reach the Dask scheduler ({_first_line(exc)})"
            ) from None
        try:
            self._check_versions()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _local_cluster(self):
        """A LocalCluster of worker processes, one thread each (a rank's decode holds the GIL)."""
        from distributed import LocalCluster

        from diagnose.ranks.analyse import default_workers

        return LocalCluster(
            n_workers=self.workers or default_workers(),
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",  # any free port: never fails on a port another run holds
            silence_logs=logging.CRITICAL,  # what goes wrong reaches the driver as one line; no worker log noise
            preload=[__name__],  # dask_setup below, in each worker process (and in one the nanny restarts)
        )

    def _check_versions(self) -> None:
        """One line when the workers run another diagnose (or none), or Dask's own packages differ."""
        assert self.client is not None
        try:
            self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except TimeoutError:
            raise UsageError(
                f"--cluster {self.address}: the scheduler has no workers (waited {WORKERS_TIMEOUT_S} s)"
            ) from None
        try:
            theirs = self.client.run(worker_version)
        except Exception as exc:  # the workers could not even unpickle diagnose's function
            raise UsageError(
                f"--cluster {self.address}: the workers cannot run diagnose ({_first_line(exc)}); "
                f"install diagnose {__version__} where they run"
            ) from None
        other = sorted({v for v in theirs.values() if v != __version__})
        if other:
            raise UsageError(
                f"--cluster {self.address}: the workers run diagnose {', '.join(other)}, this driver "
                f"{__version__}: install one version on both"
            )
        try:
            self.client.get_versions(check=True)
        except ValueError as exc:
            raise UsageError(f"--cluster {self.address}: {_first_line(exc)}") from None

    @property
    def dashboard_link(self) -> str:
        """Where the Dask dashboard is (served only where bokeh is installed)."""
        link = self.client.dashboard_link if self.client is not None else ""
        if self.local and importlib.util.find_spec("bokeh") is None:
            return f"{link} (install bokeh to serve it)"
        return link

    def map_ranks(self, sources: list, config, max_bytes: int | None, report) -> list[dict]:
        """One task a rank, results gathered as they finish (each future released once read, so the
        cluster keeps nothing either); a rank whose task killed its workers is a failed rank."""
        from distributed import KilledWorker, as_completed

        from diagnose.ranks.analyse import analyse_rank, failed_rank

        assert self.client is not None
        total = len(sources)
        report({"phase": "ranks", "done": 0, "total": total})
        run = uuid.uuid4().hex[:8]
        futures = self.client.map(
            self.task or analyse_rank,
            [dataclasses.replace(s, path=s.path.absolute()) for s in sources],  # workers have their own cwd
            config=config,
            max_bytes=max_bytes,
            key=[f"rank-{s.rank}-{i}-{run}" for i, s in enumerate(sources)],
            retries=self.retries,
            pure=False,
        )
        where = {f.key: i for i, f in enumerate(futures)}
        out: list = [None] * total
        try:
            for done, future in enumerate(as_completed(futures), start=1):
                i = where[future.key]
                try:
                    out[i] = _as_given(future.result(), sources[i])
                except KilledWorker as exc:
                    out[i] = failed_rank(sources[i], f"its worker died each time it ran ({_first_line(exc)})")
                future.release()
                report({"phase": "ranks", "done": done, "total": total})
        except BaseException:  # Ctrl-C, SIGTERM, a bug in a rank: nothing more runs for this folder
            self.client.cancel(futures, force=True)
            raise
        finally:
            futures.clear()
        return out

    def reference(self, path: str, config, ranks, max_bytes: int | None):
        """The reference rank's full rules, run on a worker (its trace is read there)."""
        from diagnose.ranks.analyse import reference_diagnosis

        assert self.client is not None
        shared = self.client.scatter(ranks, hash=False)  # the rank profiles go once, not inside the graph
        future = self.client.submit(
            reference_diagnosis, str(Path(path).absolute()), config, shared, max_bytes, retries=self.retries, pure=False
        )
        try:
            return future.result()
        except BaseException:
            self.client.cancel([future, shared], force=True)
            raise

    def close(self) -> None:
        """Close the client, then the LocalCluster (its worker processes end with it)."""
        for part in (self.client, self.cluster):
            if part is not None:
                try:
                    part.close(timeout=10) if part is self.client else part.close()
                except Exception:  # closing is best effort; the processes are the cluster's to end
                    pass
        self.client = self.cluster = None


def _as_given(result: dict, source) -> dict:
    """A rank's result as the driver keeps it: naming its trace as the command line did (a relative
    path stays relative in findings.json, as on the local pool), though the worker was sent the
    absolute path; its profile's strings interned, as every rank names the same kernels and ops."""
    result["path"] = str(source.path)
    if "profile" in result:
        result["profile"] = _interned(result["profile"])
        result["profile"]["source"] = str(source.path)
    return result


def _interned(value):
    """`value` (plain dicts, lists, strings, numbers) with every string interned: a rank's profile
    unpickles with its own copy of each kernel name, and half of what the driver holds per rank was
    those copies (110 KiB a rank of HTA's DDP trace, 51 KiB interned; tracemalloc, this machine)."""
    if type(value) is str:
        return sys.intern(value)
    if type(value) is dict:
        return {_interned(k): _interned(v) for k, v in value.items()}
    if type(value) is list:
        return [_interned(v) for v in value]
    return value


def _first_line(exc: BaseException) -> str:
    """An exception as one line: its first line, its type where it has no text."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
