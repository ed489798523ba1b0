"""Local updates that survive a lost and a returning worker, on one machine.

    pip install ./crates/py torchft==0.2.0
    python crates/py/examples/local_membership.py            # lighthouse + 3 workers; kills and revives one

It starts torchft's lighthouse, then three worker processes training a small
regression with `gradcomp.torch.LocalUpdates(..., manager=...)`; after a few
rounds it kills worker 2 (`kill -9`, as a host that dies), the other two go
on without it, and a new worker 2 started 2 s later heals from a live peer
and takes part again. Each worker prints its rounds: the step, how many
workers took part, whether it healed into the round and whether the round
was committed. One worker alone: `python local_membership.py worker RANK
LIGHTHOUSE [HOST]` (e.g. on three machines, each with its own address as
HOST, the one its peers reach it at; default 127.0.0.1), the lighthouse
started once with torchft's own CLI, `torchft_lighthouse --min_replicas 2
--join_timeout_ms 3000` (docs/PYTHON.md says how to keep it running).
"""
import json
import os
import subprocess
import sys
import time
from typing import List

import torch

import gradcomp.torch as gt

STEPS = 80


def worker(rank: int, lighthouse: str, host: str = "127.0.0.1") -> None:
    torch.manual_seed(rank)  # different starts: the first quorum heals them to one model
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # A round's collectives may take 4× the network model's round time (at
    # 100 Mbit/s among 3) before its peers count as lost; at least 5 s.
    timeout = gt.round_timeout(model, link_bps=100e6, workers=3, period=8)
    manager = gt.manager(lighthouse=lighthouse, replica_id=f"worker{rank}", round_timeout=timeout,
                         min_replicas=2, host=host)
    outer = gt.LocalUpdates(model, opt, period=8, outer="sgd", manager=manager, max_workers=8)
    target = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    data = torch.Generator().manual_seed(100 + rank)
    seen = 0
    while outer.inner_steps < STEPS:
        time.sleep(0.1)  # a step's compute
        x = torch.randn(32, 16, generator=data)
        loss = ((model(x) - x @ target.T) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        outer.step()
        for e in outer.events[seen:]:
            print(f"worker {rank}: round at step {e['step']:3d}: {e['workers']} workers"
                  f"{', healed into it' if e['healed'] else ''}, "
                  f"{'committed' if e['committed'] else 'discarded: ' + str(e['error'])[:80]}, "
                  f"{e['seconds']:.2f} s; loss {loss.item():.4f}", flush=True)
        seen = len(outer.events)
    manager.shutdown(wait=False)


def main() -> None:
    os.environ.setdefault("RUST_LOG", "warn")  # before torchft's logger starts: no per-quorum INFO lines
    from torchft._torchft import LighthouseServer  # type: ignore[import-untyped]
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=3000, heartbeat_timeout_ms=2000)
    address = lighthouse.address()
    print(f"lighthouse at {address}", flush=True)

    def start(rank: int) -> "subprocess.Popen[bytes]":
        return subprocess.Popen([sys.executable, __file__, "worker", str(rank), address])

    procs: List["subprocess.Popen[bytes]"] = [start(r) for r in range(3)]
    time.sleep(9)
    print("== killing worker 2", flush=True)
    procs[2].kill()
    procs[2].wait()
    time.sleep(2)
    print("== starting worker 2 again", flush=True)
    procs[2] = start(2)
    codes = [p.wait(timeout=300) for p in procs]
    lighthouse.shutdown()
    print(json.dumps({"exit codes": codes}))
    sys.exit(max(codes))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "worker":
        worker(int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
    else:
        main()
