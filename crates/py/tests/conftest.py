"""Starts DDP runs of ddp_worker.py on gloo, one process per rank, on 127.0.0.1."""
from typing import Any, List, NamedTuple
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> Any:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ran(NamedTuple):
    """What one process of `run_ranks` printed, and its exit code."""
    out: str
    err: str
    code: int


def run_ranks(script: str, world: int, *args: str, timeout: float = 300) -> List[Ran]:
    """Runs the Python `script` as `world` processes, each given its rank, then `args`, on
    its command line; returns what each printed. A process still running at `timeout` is
    killed with its peers, and the timeout raised."""
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [Ran(out, err, p.returncode) for (out, err), p in zip(outs, procs)]


def run_ddp(cases: Any, world: Any, tmp_path: Any, timeout: Any = 600) -> Any:
    """Runs `cases` in one process group of `world` ranks; returns each rank's results."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"cases": cases}))
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "ddp_worker.py"), str(spec), str(tmp_path)],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            logs.append(out.decode(errors="replace"))
    finally:
        for p in procs:
            p.kill()
    results = []
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no result:\n" + "\n".join(logs)
        results.append(json.loads(path.read_text()))
    return results


@pytest.fixture
def ddp(tmp_path: Any) -> Any:
    return lambda cases, world, sub="run": run_ddp(cases, world, tmp_path / sub)
