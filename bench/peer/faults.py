"""Faults under membership (issue #49, point 7): gradcomp's LocalUpdates on torchft, and
torchft's own DiLoCo, on netsim hosts while workers are killed, revived and stopped.

    bench/peer/faults.py run --framework gradcomp|torchft --out DIR [--faults]
    bench/peer/faults.py eval DIR...        test perplexity of the evaluator's saved models
    bench/peer/faults.py table DIR...       the table (time to target, goodput, detect, heal)
    bench/peer/faults.sh OUT heal           the GPT's heal alone: 2 hosts, one joins 30 s late and heals

`run` (root): 4 worker hosts at RATE (scripts/netsim.sh up), the lighthouse on a fifth,
unshaped host of its own (gcns-h5, never faulted), one worker process per host (the
`worker` subcommand). With `--faults`, at fractions of the run by worker 1's inner steps: worker host 2 killed at 25% (scripts/netsim.sh kill-host: every process in it
killed, its namespace gone, no FIN/RST reaches the peers) and revived at 50% (a fresh
namespace and a new worker process, which joins the next quorum and heals from a live
peer), worker 3 stopped (SIGSTOP) for 60 s at 75%. Worker 1 is never faulted: it saves
its model every `--save-every` steps with the wall-clock (evaluated afterwards by `eval`,
off the run's clock and CPUs). Every worker process writes DIR/wI.L.jsonl (L its life):
each step, each round (torchft's verdict, workers, healed), each heal (bytes, seconds).
The round timeout of both frameworks is gradcomp.torch.round_timeout's (dense pricing:
fp4 is not priced, dense bounds it) rounded up to whole seconds (torchft's checkpoint
server fails every heal under about 2% of fractional timeouts: gradcomp.torch.manager
rounds its own; torchft's Manager takes this one as it is), the lighthouse's heartbeat
timeout 1 s, join 5 s.
"""
import argparse
import datetime
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
PY = sys.executable
PFX, SUBNET = os.environ.get("NETSIM_PREFIX", "gcns"), os.environ.get("NETSIM_SUBNET", "10.77.0")
NETSIM = os.path.join(ROOT, "scripts", "netsim.sh")
LIGHTHOUSE_PORT = 29510
HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_MS = 1000, 5000


def tensor_bytes(obj, seen=None):
    """The bytes of the tensors in `obj`, each storage once (torch.save sends a storage that
    two tensors share once: gradcomp's healer sends θ_outer as the model too)."""
    import torch
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        st = obj.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key in seen:
            return 0
        seen.add(key)
        return st.nbytes()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    if hasattr(obj, "nbytes"):
        return int(obj.nbytes)
    return 0


# -- a worker ------------------------------------------------------------------------------

def start_together(out, me, count, timeout=300.0):
    """Wait until `count` workers of the run's start have their managers up (heartbeating),
    before any of them asks for its first quorum. Without it the first to start (2 cores,
    four processes importing torch) formed the first quorum alone with min_replicas, and a
    fault-free torchft run stayed at 3 workers for good (its heals, 6.5 s, outlast the join
    timeout; docs/RESULTS.md, the race's faults). A file per worker in OUT/ready (one host)."""
    ready = os.path.join(out, "ready")
    os.makedirs(ready, exist_ok=True)
    open(os.path.join(ready, me), "w").close()
    deadline = time.time() + timeout
    while len(os.listdir(ready)) < count:
        if time.time() > deadline:
            raise SystemExit(f"{me}: {len(os.listdir(ready))} of --start-with {count} workers ready "
                             f"after {timeout:.0f} s: see the other workers' logs")
        time.sleep(0.05)

def worker(a):
    import torch
    from torch._C._distributed_c10d import TCPStore
    import models
    import train
    cfg = tomllib.load(open(a.config, "rb"))
    cfg["seed"] = a.seed
    torch.set_num_threads(1)
    os.environ.setdefault("RUST_LOG", "warn")
    rank = int(a.id[1:]) - 1
    torch.manual_seed(a.seed)
    model, task = models.build(cfg)
    opt = train.optimizer(cfg["optimizer"], model.parameters())
    batches = train.Batches(cfg, task, rank, a.world)
    log = open(os.path.join(a.out, f"{a.id}.{a.life}.jsonl"), "w")

    def rec(**kw):
        kw["t"] = time.time()
        log.write(json.dumps(kw) + "\n")
        log.flush()

    rec(kind="start", pid=os.getpid(), framework=a.framework)
    timeout = a.round_timeout
    lighthouse = f"http://{a.lighthouse}"

    def wrap_recv(m):
        orig = m._checkpoint_transport.recv_checkpoint

        def recv(*args, **kw):
            t0 = time.time()
            r = orig(*args, **kw)
            rec(kind="heal", seconds=time.time() - t0, bytes=tensor_bytes(r), began=t0)
            return r
        m._checkpoint_transport.recv_checkpoint = recv

    state = {"steps": 0, "healed": False, "computed": 0, "quorum_t": None}
    if a.framework == "gradcomp":
        import gradcomp.torch as gt
        m = gt.manager(lighthouse=lighthouse, replica_id=a.id, round_timeout=timeout,
                       min_replicas=a.min_replicas, host=a.host)
        wrap_recv(m)
        start_together(a.out, a.id, a.start_with)
        lu = gt.LocalUpdates(model, opt, period=a.period, outer=a.outer, manager=m, max_workers=a.world,
                             compressor=a.compressor, fragments=a.fragments)
        steps_now = lambda: lu.inner_steps  # noqa: E731
        seen = 0

        def after_step():
            nonlocal seen
            for ev in lu.events[seen:]:
                rec(kind="round", computed=state["computed"], **ev)
                state["computed"] = 0
            seen = len(lu.events)
        after_step()
    else:
        from torchft.local_sgd import DiLoCo
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo
        import torch_local

        def _load(sd):
            model.load_state_dict(sd["model"])
            opt.load_state_dict(sd["optimizer"])
            state["steps"] = int(sd["inner_steps"])
            state["healed"] = True

        def _state():
            return {"model": model.state_dict(), "optimizer": opt.state_dict(), "inner_steps": state["steps"]}
        store = TCPStore(a.host, 0, is_master=True, wait_for_workers=False)
        td = datetime.timedelta(seconds=timeout)
        m = Manager(pg=ProcessGroupGloo(timeout=td), min_replica_size=a.min_replicas, load_state_dict=_load,
                    state_dict=_state, replica_id=a.id, store_addr=a.host, store_port=store.port, rank=0,
                    world_size=1, lighthouse_addr=lighthouse, hostname=a.host, use_async_quorum=False,
                    init_sync=False, timeout=td, quorum_timeout=datetime.timedelta(seconds=600),
                    connect_timeout=datetime.timedelta(seconds=60),
                    heartbeat_interval=datetime.timedelta(seconds=0.1))
        wrap_recv(m)
        start_together(a.out, a.id, a.start_with)
        sq, sc = m.start_quorum, m.should_commit

        def start_quorum(*args, **kw):
            state["quorum_t"] = time.time()
            return sq(*args, **kw)

        def should_commit(*args, **kw):
            ok = sc(*args, **kw)
            err = m.errored()
            rec(kind="round", step=state["steps"], workers=m.num_participants(), healed=state["healed"],
                committed=ok, error=None if err is None else str(err), computed=state["computed"],
                seconds=time.time() - (state["quorum_t"] or time.time()))
            state["healed"], state["computed"] = False, 0
            return ok
        m.start_quorum, m.should_commit = start_quorum, should_commit
        parts = torch_local.fragments(model, a.fragments)
        outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) if a.outer == "nesterov"
                 else torch.optim.SGD(f.parameters(), lr=1.0) for f in parts]
        diloco = DiLoCo(m, parts, opt, outer, sync_every=a.period, fragment_sync_delay=0,
                        fragment_update_alpha=0.0)
        diloco.__enter__()
        steps_now = lambda: state["steps"]  # noqa: E731
        after_step = lambda: None  # noqa: E731

    first = True
    while steps_now() < a.steps:
        if os.path.exists(os.path.join(a.out, "stop")):
            break
        s = steps_now()
        if first:
            rec(kind="first_step", step=s)
            first = False
        x, y = batches.get(s % batches.per_epoch)
        state["steps"] = s + 1  # torchft's rounds run inside opt.step(): the step they end
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        state["computed"] += 1
        opt.step()
        if a.framework == "gradcomp":
            lu.step()
        after_step()
        now = steps_now()
        rec(kind="step", step=now, loss=round(loss.item(), 4))
        if a.save_every and now % a.save_every == 0 and now != s:
            os.makedirs(os.path.join(a.out, "models"), exist_ok=True)
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            torch.save(flat, os.path.join(a.out, "models", f"step-{now}.pt"))
            rec(kind="saved", step=now)
    rec(kind="end", step=steps_now())
    if a.id == "w1":
        open(os.path.join(a.out, "stop"), "w").close()
    log.close()
    os._exit(0)


def lighthouse(a):
    from torchft._torchft import LighthouseServer
    lh = LighthouseServer(bind=f"[::]:{a.port}", min_replicas=a.min_replicas, join_timeout_ms=a.join_timeout_ms,
                          heartbeat_timeout_ms=a.heartbeat_timeout_ms)
    print(f"lighthouse at {lh.address()}", flush=True)
    while True:
        time.sleep(3600)


# -- the driver ----------------------------------------------------------------------------

def sh(*args, check=True):
    return subprocess.run(list(args), check=check, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def netns(i):
    return f"{PFX}-h{i}"


def exit_on_sigterm():
    """SIGTERM (a `kill`, a session's end) raises SystemExit like Ctrl-C's KeyboardInterrupt,
    so `run`'s `finally` stops the workers and takes the netsim hosts down: by default
    Python dies on it at once and leaves both behind."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def run(a):
    exit_on_sigterm()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    for f in glob.glob(os.path.join(out, "*.jsonl")) + [os.path.join(out, "stop")]:
        if os.path.exists(f):
            os.remove(f)
    shutil.rmtree(os.path.join(out, "ready"), ignore_errors=True)
    import torch
    import models
    import gradcomp.torch as gt
    cfg = tomllib.load(open(a.config, "rb"))
    model, _ = models.build(cfg)
    timeout = float(math.ceil(gt.round_timeout(model, link_bps=a.link_bps, workers=a.workers, period=a.period,
                                               compressor="dense", fragments=a.fragments, outer=a.outer)))
    del model, torch
    lh_host = a.workers + 1
    # The workers that start at t = 0 (with --join-late the last one joins later).
    first = [i for i in range(1, a.workers + 1) if not (a.join_late and i == a.workers)]
    sh(NETSIM, "up", str(a.workers), a.rate)
    sh(NETSIM, "revive-host", str(lh_host), "none")
    procs, logs = {}, []
    events = open(os.path.join(out, "driver.jsonl"), "w")

    def note(**kw):
        kw["t"] = time.time()
        events.write(json.dumps(kw) + "\n")
        events.flush()
        print(json.dumps(kw), flush=True)

    def start_worker(i, life, together=0):
        lf = open(os.path.join(out, f"w{i}.{life}.log"), "w")
        logs.append(lf)
        # Its own UTS namespace, its host name its address: torchft's checkpoint server (the
        # heal's source) advertises socket.gethostname(), which here would name the machine
        # (127.0.0.1 in every namespace) and refuse every heal.
        cmd = ["ip", "netns", "exec", netns(i), "unshare", "--uts", "sh", "-c",
               f'hostname {SUBNET}.{i}; exec "$@"', "worker", "env", "OMP_NUM_THREADS=1", "GLOO_SOCKET_IFNAME=eth0",
               "RUST_LOG=warn", PY, __file__, "worker", "--framework", a.framework, "--id", f"w{i}",
               "--life", str(life), "--host", f"{SUBNET}.{i}", "--lighthouse", f"{SUBNET}.{lh_host}:{LIGHTHOUSE_PORT}",
               "--config", a.config, "--seed", str(a.seed), "--steps", str(a.steps), "--out", out,
               "--world", str(a.workers), "--period", str(a.period), "--fragments", str(a.fragments),
               "--compressor", a.compressor, "--outer", a.outer, "--round-timeout", str(timeout),
               "--min-replicas", str(a.min_replicas), "--save-every", str(a.save_every if i == 1 else 0),
               # The run's first workers start `together`; a revived or late one joins as it comes.
               "--start-with", str(together)]
        procs[(i, life)] = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
        note(kind="worker_started", worker=i, life=life, pid=procs[(i, life)].pid)

    lh_log = open(os.path.join(out, "lighthouse.log"), "w")
    lh = subprocess.Popen(["ip", "netns", "exec", netns(lh_host), PY, __file__, "lighthouse", "--port",
                           str(LIGHTHOUSE_PORT), "--min-replicas", str(a.min_replicas),
                           "--join-timeout-ms", str(JOIN_TIMEOUT_MS),
                           "--heartbeat-timeout-ms", str(HEARTBEAT_TIMEOUT_MS)], stdout=lh_log, stderr=subprocess.STDOUT)
    try:
        time.sleep(2)
        import hashlib
        import gradcomp._membership as gm
        note(kind="installed", gradcomp_membership_sha1=hashlib.sha1(open(gm.__file__, "rb").read()).hexdigest(),
             mtime=os.path.getmtime(gm.__file__))
        note(kind="run", framework=a.framework, faults=a.faults, round_timeout=timeout, rate=a.rate,
             steps=a.steps, seed=a.seed, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS, join_timeout_ms=JOIN_TIMEOUT_MS,
             config=os.path.relpath(a.config, ROOT))
        for i in first:
            start_worker(i, 1, together=len(first))
        # t = 0: worker 1's first training step.
        w1 = os.path.join(out, "w1.1.jsonl")
        t0 = None
        while t0 is None:
            time.sleep(0.2)
            if os.path.exists(w1):
                for line in open(w1):
                    r = json.loads(line)
                    if r["kind"] == "first_step":
                        t0 = r["t"]
            if procs[(1, 1)].poll() is not None:
                raise SystemExit("worker 1 ended before its first step: see w1.1.log")
        note(kind="t0", at=t0)
        # The faults at fractions of the run, by worker 1's progress (its inner steps): a
        # faulted run is not as long as its pair in seconds (on this machine's 2 cores three
        # workers step faster than four), so a fraction of the fault-free run's seconds can
        # fall after the faulted run's end. The stop's end is in seconds (60 s after it began).
        schedule = []  # (step or None, seconds after t0 or None, kind, worker)
        if a.faults:
            schedule = [(a.steps // 4, None, "kill", 2), (a.steps // 2, None, "revive", 2),
                        (3 * a.steps // 4, None, "stop", 3), (None, a.stop_seconds, "cont", 3)]
            note(kind="schedule", faults=schedule)
        if a.join_late:  # the last worker joins this long after t0 (the heal alone, `heal` below)
            schedule.append((None, a.join_late, "join", a.workers))
        deadline = t0 + a.limit
        w1_log, w1_step, last_fault, w1_done = open(w1), 0, t0, None
        while True:
            now = time.time()
            for line in w1_log.readlines():
                if line.endswith("\n") and '"kind": "step"' in line:
                    w1_step = json.loads(line)["step"]
            while schedule and ((schedule[0][0] is not None and w1_step >= schedule[0][0]) or
                                (schedule[0][1] is not None and now >= last_fault + schedule[0][1])):
                _, _, kind, w = schedule.pop(0)
                last_fault = now
                if kind == "kill":
                    note(kind="fault", fault="kill-host", worker=w)
                    sh(NETSIM, "kill-host", str(w))
                elif kind == "revive":
                    sh(NETSIM, "revive-host", str(w), a.rate)
                    note(kind="fault", fault="revive-host", worker=w)
                    start_worker(w, 2)
                elif kind == "join":
                    note(kind="fault", fault="join", worker=w)
                    start_worker(w, 1)
                elif kind == "stop":
                    note(kind="fault", fault="sigstop", worker=w)
                    procs[(w, 1)].send_signal(signal.SIGSTOP)
                elif kind == "cont":
                    procs[(w, 1)].send_signal(signal.SIGCONT)
                    note(kind="fault", fault="sigcont", worker=w)
            if a.join_late and not schedule and not os.path.exists(os.path.join(out, "stop")):
                late = os.path.join(out, f"w{a.workers}.1.jsonl")
                rs = [json.loads(line) for line in open(late)] if os.path.exists(late) else []
                healed = [r for r in rs if r["kind"] == "heal"]
                if healed and any(r["kind"] == "round" and r["committed"] and r["t"] > healed[0]["t"] for r in rs):
                    open(os.path.join(out, "stop"), "w").close()  # measured: every worker ends
            alive = [k for k, p in procs.items() if p.poll() is None]
            if not alive and not schedule:
                break
            # Worker 1 has ended the run: the others get 15 s (a stopped one resumed, its quorum
            # would otherwise wait for peers that have gone).
            if procs[(1, 1)].poll() is not None and not schedule:
                w1_done = w1_done or now
                if now > w1_done + 15:
                    note(kind="ended_after_worker_1", alive=[f"w{i}.{l}" for i, l in alive])
                    break
            if now > deadline:
                note(kind="limit", alive=alive)
                break
            time.sleep(0.1)
        note(kind="done", rc={f"w{i}.{l}": p.poll() for (i, l), p in procs.items()})
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        lh.kill()
        lh.wait()
        sh(NETSIM, "down", str(a.workers), check=False)
        sh("ip", "netns", "del", netns(lh_host), check=False)


# -- evaluation and the table --------------------------------------------------------------

def evaluate(a):
    import torch
    import models
    import train
    torch.set_num_threads(2)
    cfg = tomllib.load(open(a.config, "rb"))
    model, task = models.build(cfg)
    for d in a.dirs:
        saved = {}
        for line in open(os.path.join(d, "w1.1.jsonl")):
            r = json.loads(line)
            if r["kind"] == "saved":
                saved[r["step"]] = r["t"]
        t0 = run_t0(d)
        # Written aside and renamed when whole: faults.sh takes an evals.jsonl as done.
        part = os.path.join(d, "evals.jsonl.part")
        with open(part, "w") as f:
            for step in sorted(saved):
                flat = torch.load(os.path.join(d, "models", f"step-{step}.pt"))
                off = 0
                with torch.no_grad():
                    for p in model.parameters():
                        p.copy_(flat[off:off + p.numel()].reshape(p.shape))
                        off += p.numel()
                metric = train.evaluate(model, cfg, task)
                r = {"steps": step, "seconds": saved[step] - t0, **metric}
                f.write(json.dumps(r) + "\n")
                print(d, json.dumps(r), flush=True)
        os.replace(part, os.path.join(d, "evals.jsonl"))


def run_t0(d):
    for line in open(os.path.join(d, "driver.jsonl")):
        r = json.loads(line)
        if r["kind"] == "t0":
            return r["at"]
    raise SystemExit(f"{d}: no t0")


def records(d):
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "w*.jsonl"))):
        out[os.path.basename(f)[:-6]] = [json.loads(line) for line in open(f)]
    return out


def table_run(d, target=350.0):
    """What one run measured: its length, time to target, goodput, detection and heals."""
    t0 = run_t0(d)
    driver = [json.loads(line) for line in open(os.path.join(d, "driver.jsonl"))]
    info = next(r for r in driver if r["kind"] == "run")
    recs = records(d)
    end = max((r["t"] for rs in recs.values() for r in rs if r["kind"] == "end"), default=None)
    res = {"dir": d, "framework": info["framework"], "faults": info["faults"], "seed": info.get("seed", 1),
           "round_timeout": info["round_timeout"],
           "seconds_total": (end - t0) if end else None}
    evals = [json.loads(line) for line in open(os.path.join(d, "evals.jsonl"))] \
        if os.path.exists(os.path.join(d, "evals.jsonl")) else []
    hit = next((e for e in evals if e["test_perplexity"] <= target), None)
    res["target"] = target
    res["time_to_target"] = hit["seconds"] if hit else None
    res["steps_to_target"] = hit["steps"] if hit else None
    res["final_perplexity"] = evals[-1]["test_perplexity"] if evals else None
    computed = committed = 0
    rounds = discarded = 0
    for name, rs in recs.items():
        steps = sum(1 for r in rs if r["kind"] == "step")
        computed += steps
        for r in rs:
            if r["kind"] == "round":
                rounds += 1
                if r["committed"] and not r["healed"]:
                    committed += r["computed"]
                if not r["committed"]:
                    discarded += 1
    # Against full capacity (issue #69): every worker of the run computing the run's steps; a
    # stalled or lost worker's steps that were never computed count as lost here, not above.
    workers = len({name.split(".")[0] for name in recs})
    capacity = workers * info["steps"] if info.get("steps") else None
    res.update(computed=computed, committed=committed, goodput=committed / computed if computed else None,
               capacity=committed / capacity if capacity else None, rounds=rounds, discarded_rounds=discarded)
    faults = [r for r in driver if r["kind"] == "fault"]
    res["faults_at"] = {f["fault"]: round(f["t"] - t0, 1) for f in faults}
    # Detection: a fault to the end of the survivors' first committed round without the
    # faulted worker (workers < 4), on each survivor; the latest survivor counts.
    det = {}
    for f in faults:
        if f["fault"] not in ("kill-host", "sigstop"):
            continue
        w = f"w{f['worker']}"
        worst = None
        for name, rs in recs.items():
            if name.startswith(w + ".") or name.startswith("w" + str(f["worker"])):
                continue
            r = next((r for r in rs if r["kind"] == "round" and r["t"] > f["t"] and r["committed"]
                      and r["workers"] < 4), None)
            if r is None:
                continue
            d_end = r["t"] - f["t"]
            worst = d_end if worst is None else max(worst, d_end)
        det[f["fault"]] = worst
    res["detect"] = det
    # Heals after the first fault (the start's, where torchft syncs the replicas from one at
    # its first quorum, are left out).
    heals = []
    first_fault = min((f["t"] for f in faults), default=math.inf)
    for name, rs in recs.items():
        for r in rs:
            if r["kind"] == "heal" and r["began"] >= first_fault:
                first_commit = next((q for q in rs if q["kind"] == "round" and q["t"] >= r["t"] and q["committed"]), None)
                heals.append({"worker": name, "at": round(r["began"] - t0, 1), "seconds": r["seconds"],
                              "bytes": r["bytes"],
                              "to_commit": (first_commit["t"] - r["began"]) if first_commit else None})
    res["heals"] = heals
    revive = next((f for f in faults if f["fault"] == "revive-host"), None)
    if revive:
        rs = recs.get("w%d.2" % revive["worker"], [])
        c = next((q for q in rs if q["kind"] == "round" and q["committed"] and not q["healed"]), None)
        res["revive_to_first_contribution"] = (c["t"] - revive["t"]) if c else None
    # Default timeouts: any round that took longer than the round timeout plus the quorum's join timeout.
    # The longest round after the start's (whose quorum waits for every worker's start-up).
    res["longest_round"] = max((r["seconds"] for rs in recs.values() for r in rs if r["kind"] == "round"
                                and r["t"] > t0 + 15), default=None)
    return res


def table(a):
    rows = [table_run(d, a.target) for d in a.dirs]
    # A faulted run against its twin: the same framework and seed without faults.
    base = {(r["framework"], r["seed"]): r for r in rows if not r["faults"]}
    print("| framework | seed | faults | time to ppl %g (s) | vs no faults | final ppl | goodput (of capacity) | "
          "rounds (discarded) | "
          "detect kill / stop (s) | heals: s, MB | round timeout (s) | longest round (s) |" % a.target)
    print("|---|---:|---|---|---|---|---|---|---|---|---|---|")
    f = lambda v, p=1: "—" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in rows:
        b = base.get((r["framework"], r["seed"]))
        ratio = r["time_to_target"] / b["time_to_target"] if b and b["time_to_target"] and r["time_to_target"] else None
        heals = "; ".join(f"{h['worker']} {h['seconds']:.2f} s {h['bytes'] / 1e6:.1f} MB" for h in r["heals"]) or "—"
        det = r["detect"]
        print(f"| {r['framework']} | {r['seed']} | {'yes' if r['faults'] else 'no'} | {f(r['time_to_target'])} "
              f"(step {r['steps_to_target']}) | {f(ratio, 2)}× | {f(r['final_perplexity'])} | "
              f"{r['committed']}/{r['computed']} = {100 * r['goodput']:.1f}% ({f(r['capacity'] and 100 * r['capacity'])}%) | "
              f"{r['rounds']} ({r['discarded_rounds']}) | "
              f"{f(det.get('kill-host'))} / {f(det.get('sigstop'))} | {heals} | {r['round_timeout']:.1f} | "
              f"{f(r['longest_round'])} |")
    if a.json:
        with open(a.json, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--framework", required=True)
    w.add_argument("--id", required=True)
    w.add_argument("--life", type=int, default=1)
    w.add_argument("--host", required=True)
    w.add_argument("--lighthouse", required=True)
    w.add_argument("--round-timeout", type=float, required=True)
    w.add_argument("--min-replicas", type=int, default=2)
    w.add_argument("--save-every", type=int, default=0)
    w.add_argument("--start-with", type=int, default=0,
                   help="wait for this many workers' managers before the first quorum (0: none)")
    r = sub.add_parser("run")
    r.add_argument("--framework", required=True, choices=["gradcomp", "torchft"])
    r.add_argument("--faults", action="store_true")
    r.add_argument("--schedule-from", help="unused (the faults are timed by worker 1's steps)")
    r.add_argument("--stop-seconds", type=float, default=60.0)
    r.add_argument("--rate", default="100mbit")
    r.add_argument("--link-bps", type=float, default=100e6)
    r.add_argument("--workers", type=int, default=4)
    r.add_argument("--min-replicas", type=int, default=2)
    r.add_argument("--save-every", type=int, default=50)
    r.add_argument("--join-late", type=float, default=0.0,
                   help="the last worker starts this many seconds after t0 and heals (the heal measured alone)")
    r.add_argument("--limit", type=float, default=1500.0, help="seconds after t0 before the driver gives up")
    for q in (w, r):
        q.add_argument("--config", default=os.path.join(ROOT, "experiments", "tta-ptb-lstm-local.toml"))
        q.add_argument("--seed", type=int, default=1)
        q.add_argument("--steps", type=int, default=600)
        q.add_argument("--out", required=True)
        q.add_argument("--world", type=int, default=4)
        q.add_argument("--period", type=int, default=32)
        q.add_argument("--fragments", type=int, default=4)
        q.add_argument("--compressor", default="fp4")
        q.add_argument("--outer", default="sgd")
    lh = sub.add_parser("lighthouse")
    lh.add_argument("--port", type=int, default=LIGHTHOUSE_PORT)
    lh.add_argument("--min-replicas", type=int, default=2)
    lh.add_argument("--join-timeout-ms", type=int, default=JOIN_TIMEOUT_MS)
    lh.add_argument("--heartbeat-timeout-ms", type=int, default=HEARTBEAT_TIMEOUT_MS)
    e = sub.add_parser("eval")
    e.add_argument("dirs", nargs="+")
    e.add_argument("--config", default=os.path.join(ROOT, "experiments", "tta-ptb-lstm-local.toml"))
    t = sub.add_parser("table")
    t.add_argument("dirs", nargs="+")
    t.add_argument("--target", type=float, default=350.0)
    t.add_argument("--json")
    a = p.parse_args()
    {"worker": worker, "run": run, "lighthouse": lighthouse, "eval": evaluate, "table": table}[a.cmd](a)


if __name__ == "__main__":
    main()
