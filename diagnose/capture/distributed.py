"""`--nproc-per-node N`: one capture per rank, launched by torchrun's own agent and rendezvous.

The parent (no torch) starts `python -m torch.distributed.run --nproc-per-node N ... -m
diagnose.child.capture SPEC` in a process group of its own, exactly as runner.py starts a single
child: the same timeout, the same end of the whole group whatever happens. torchrun starts N copies
of diagnose's child; each one sees RANK in its environment and DIAGNOSE_RANK_FOLDERS, writes its
capture (same warm-up, unprofiled timing and profiled steps as a single capture) into `rank-K/`,
and the parent then writes one meta.json above them: the launch, each rank's status, and the first
failed rank's error. Multi-node is torchrun's job: `--nnodes` and `--rdzv-endpoint` are passed
through (c10d rendezvous); without them the launch is `--standalone` on this host.

Progress lines do not cross torchrun (it closes inherited descriptors), so a distributed capture
shows one phase, "ranks".
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from diagnose.capture.launch import CannotStart, run_child
from diagnose.capture.runner import TRACE_FILE, _finalise_meta
from diagnose.capture.spec import CAPTURE_SCHEMA, CaptureSpec
from diagnose.base.errors import UsageError
from diagnose.base.safe_files import write_new

LAUNCHER = "torch.distributed.run"
RANK_ENV = "DIAGNOSE_RANK_FOLDERS"


@dataclasses.dataclass
class Launch:
    """How torchrun is asked to start the ranks."""

    nproc_per_node: int
    nnodes: str | None = None  # "2" or "1:4", as torchrun takes it
    rdzv_endpoint: str | None = None  # HOST:PORT of the c10d rendezvous (multi-node)
    node_rank: int | None = None

    def args(self) -> list[str]:
        """torchrun's own arguments for this launch."""
        out = [f"--nproc-per-node={self.nproc_per_node}"]
        if self.nnodes is not None:
            out.append(f"--nnodes={self.nnodes}")
        if self.rdzv_endpoint:
            out += ["--rdzv-backend=c10d", f"--rdzv-endpoint={self.rdzv_endpoint}"]
        elif self.nnodes in (None, "1", "1:1"):
            out.append("--standalone")
        if self.node_rank is not None:
            out.append(f"--node-rank={self.node_rank}")
        return out


def torchrun_command(spec_path: Path, launch: Launch, python: str | None = None) -> list[str]:
    """The command that runs diagnose's child on every rank through torchrun."""
    return [python or sys.executable, "-m", LAUNCHER, *launch.args(), "-m", "diagnose.child.capture", str(spec_path)]


def check_launch(launch: Launch) -> None:
    """A usage error for a launch torchrun would refuse."""
    if launch.nproc_per_node < 1:
        raise UsageError("--nproc-per-node needs at least 1 process")
    nnodes = launch.nnodes
    if nnodes is not None and not all(p.isdigit() and int(p) >= 1 for p in str(nnodes).split(":")):
        raise UsageError(f"--nnodes {nnodes!r}: expected N or MIN:MAX")
    if nnodes not in (None, "1", "1:1") and not launch.rdzv_endpoint:
        raise UsageError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT (the same on every node)")


def run_distributed(
    spec: CaptureSpec, launch: Launch, timeout_s: float = 900.0, python: str | None = None, on_progress=None
) -> dict:
    """Capture every rank into `spec.out_dir`/rank-K/ and return the top meta.json's contents."""
    check_launch(launch)
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.json"
    spec_path.write_text(spec.to_json())
    command = torchrun_command(spec_path, launch, python)
    if on_progress:
        on_progress({"phase": "ranks", "done": 0, "total": 0})
    with open(out / "workload.log", "wb") as log:
        try:
            ended = run_child(command, folder=out, timeout_s=timeout_s, log=log, env={RANK_ENV: "1"})
        except CannotStart as exc:
            why = exc.reason.strerror or exc.reason
            raise UsageError(f"--python {python or sys.executable}: cannot run it ({why})") from None
    spec_path.unlink(missing_ok=True)
    return _finalise(out, spec, launch, command, ended.returncode, ended.timed_out, timeout_s)


def _finalise(
    out: Path, spec: CaptureSpec, launch: Launch, command: list[str], returncode: int, timed_out: bool, timeout_s: float
) -> dict:
    """Close every rank's meta.json (a rank that died is `crashed`) and write the one above them."""
    expected = launch.nproc_per_node if launch.nnodes in (None, "1", "1:1") else 0
    found = {int(p.name.split("-")[1]) for p in out.glob("rank-*") if p.is_dir() and p.name[5:].isdigit()}
    ranks = []
    for rank in sorted(found | set(range(expected))):
        folder = out / f"rank-{rank}"
        folder.mkdir(exist_ok=True)
        written = folder / "meta.json"
        stamp = written.stat().st_mtime_ns if written.exists() else None  # when the rank last wrote it
        meta = _finalise_meta(folder, spec, returncode or 0, timed_out, timeout_s)
        if meta.get("status") == "crashed" and not meta["error"].get("traceback"):
            meta["error"]["traceback"] = _tail(out / "workload.log")
            write_new(folder / "meta.json", json.dumps(meta, indent=2, default=str).encode())
        ranks.append(
            {
                "rank": rank,
                "folder": folder.name,
                "status": meta.get("status"),
                "error": meta.get("error"),
                "trace": (folder / TRACE_FILE).exists(),
                "timing": meta.get("timing"),
                "_stamp": stamp,
            }
        )
    # the rank that failed first (raised, ran out of memory): the others then lose their peer and fail
    # too, or torchrun stops them (crashed); its meta.json is the one written earliest
    raised = sorted(
        (r for r in ranks if r["status"] not in ("ok", "crashed")),
        key=lambda r: (r["_stamp"] is None, r["_stamp"] or 0, r["rank"]),
    )
    failed = raised[0] if raised else next((r for r in ranks if r["status"] != "ok"), None)
    for r in ranks:
        r.pop("_stamp")
    if failed is None and returncode not in (0, None) and not ranks:
        failed = {
            "rank": None,
            "status": "crashed",
            "error": {
                "type": "Crash",
                "message": f"torchrun exited with status {returncode} before any rank started",
                "traceback": _tail(out / "workload.log"),
            },
        }
    top = {
        "schema": CAPTURE_SCHEMA,
        "target": spec.target,
        "mode": spec.mode,
        "params": spec.params,
        "argv": spec.argv,
        "status": failed["status"] if failed else "ok",
        "error": _ranked(failed) if failed else None,
        "distributed": {
            "launcher": LAUNCHER,
            "command": command[1:],
            **dataclasses.asdict(launch),
            "returncode": returncode,
        },
        "ranks": ranks,
        "files": {"log": "workload.log"},
    }
    write_new(out / "meta.json", json.dumps(top, indent=2, default=str).encode())
    return top


def _ranked(failed: dict) -> dict:
    """The failed rank's error, its message naming the rank."""
    error = dict(failed.get("error") or {})
    if failed.get("rank") is not None:
        error["message"] = f"rank {failed['rank']}: {error.get('message', '')}"
    return error


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
