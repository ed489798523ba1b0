"""PyTorch's own local-update baselines for the peer (issue #38): not gradcomp's code.

- `torch-postlocal-hH[-wW]`: torch's post-local SGD. DDP with torch's
  `post_localSGD_hook` (global allreduce of the gradients for the first W
  steps, then none: one rank per machine, so no intra-node group) and
  `PostLocalSGDOptimizer` around the config's optimizer with a
  `PeriodicModelAverager(period=H, warmup_steps=W)`: the parameters averaged
  (one allreduce of all of them) every H steps from step W. W defaults to 10,
  the `start_localSGD_iter` of the hook's documented example; torch documents
  that the averager's `warmup_steps` equals the hook's `start_localSGD_iter`.
- `torchft-diloco-hH[-pP][-dD][-nesterov]`: torchft's `DiLoCo`
  (`torchft.local_sgd`, the version installed by bench/peer/install.sh), each
  rank a replica group of one under a torchft `Manager`, a `LighthouseServer`
  on rank 0's host. P fragments (contiguous runs of the model's modules, about
  equal in parameters), `fragment_sync_delay` D, `fragment_update_alpha` 0.5
  when D ≥ 1 (Streaming DiLoCo's α, gradcomp's default), else 0. The outer
  optimizer per fragment is averaging (SGD, lr 1: the better outer step at
  this scale, docs/RESULTS.md "Local updates") or with `-nesterov` DiLoCo's
  (SGD lr 0.7, momentum 0.9, Nesterov). Pseudo-gradients cross dense
  (`should_quantize` needs CUDA).

Bytes are a worker's, counted from the tensors each allreduce is handed (as
train.py counts DDP's): the averager's flattened parameters, torchft's
fragments' changes.
"""
import os
import re
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

POSTLOCAL_WARMUP = 10
LIGHTHOUSE_PORT, STORE_PORT, MANAGER_PORT = 29510, 29600, 29700
TIMEOUT = timedelta(seconds=1800)


def parse(method):
    """(kind, settings) of a local-update baseline's name, or None."""
    m = re.fullmatch(r"torch-postlocal-h(\d+)(?:-w(\d+))?", method)
    if m:
        return "postlocal", {"period": int(m.group(1)),
                             "warmup": int(m.group(2)) if m.group(2) else POSTLOCAL_WARMUP}
    m = re.fullmatch(r"torchft-diloco-h(\d+)(?:-p(\d+))?(?:-d(\d+))?(-nesterov)?", method)
    if m:
        return "torchft", {"period": int(m.group(1)), "fragments": int(m.group(2) or 1),
                           "delay": int(m.group(3) or 0), "nesterov": bool(m.group(4))}
    return None


class PostLocal:
    """torch's post-local SGD around `make_optimizer(params)`; `ddp` is the model to call."""

    def __init__(self, model, make_optimizer, period, warmup):
        from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as pl
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        from torch.distributed.optim import PostLocalSGDOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP

        self.ddp = DDP(model, bucket_cap_mb=25)
        state = pl.PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=warmup,
                                     post_local_gradient_allreduce=False)
        self.ddp.register_comm_hook(state, pl.post_localSGD_hook)
        self.optimizer = PostLocalSGDOptimizer(
            optim=make_optimizer(self.ddp.parameters()),
            averager=PeriodicModelAverager(period=period, warmup_steps=warmup))
        self.period, self.warmup = period, warmup
        self.params = sum(p.numel() for p in model.parameters())

    def step_bytes(self, step):
        """What one worker allreduces in optimizer step `step` (0-based): the
        gradients during the warm-up, the parameters at an averaging step."""
        grads = 4 * self.params if step < self.warmup else 0
        averaged = step >= self.warmup and (step - self.warmup) % self.period == 0
        return grads + (4 * self.params if averaged else 0)


def own_address():
    """This rank's address on the network the ranks share (the one MASTER_ADDR is on)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((os.environ["MASTER_ADDR"], 9))
        return s.getsockname()[0]
    finally:
        s.close()


def partition(sizes, parts):
    """Contiguous groups of indices into `sizes`, about equal in total (as
    gradcomp's strategy cuts its fragments), each group non-empty."""
    total, groups, current, done = sum(sizes), [], [], 0
    for i, n in enumerate(sizes):
        current.append(i)
        done += n
        # Close a group at its share, leaving an index for each later one.
        later = parts - len(groups) - 1
        if later and (done >= total * (len(groups) + 1) / parts or len(sizes) - i - 1 == later):
            groups.append(current)
            current = []
    groups.append(current)
    return groups


def fragments(model, count):
    """`count` nn.ModuleLists of the model's parameter-owning modules, in their
    order, contiguous and about equal in parameters (torchft syncs a fragment
    as a module)."""
    owners = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
    sizes = [sum(p.numel() for p in m.parameters(recurse=False)) for m in owners]
    if count > len(owners):
        raise SystemExit(f"error: {count} fragments but the model has {len(owners)} parameter-owning modules")
    return [torch.nn.ModuleList(owners[i] for i in group) for group in partition(sizes, count)]


def torchft_fp8_bytes(shape, world):
    """The bytes torchft 0.2.0's fp8 allreduce (`torchft.collectives.allreduce_quantized`)
    hands its collectives for one tensor, counted as its fp32 allreduce is counted
    here (the buffer, not the ring's 2(N − 1)/N of it): per row a 4-byte fp32 scale
    and the row's fp8 values padded to 4 bytes, the rows padded to a multiple of
    the group's size (`_prepare_quantize_fp8`); a 1-D tensor has one value per row,
    8 bytes each. None for a tensor of more than 2 dimensions, which its kernels
    refuse. It needs CUDA (Triton): a formula here, never run."""
    if len(shape) > 2:
        return None
    m, n = (shape[0], 1) if len(shape) == 1 else shape
    return -(-m // world) * world * (-(-n // 4) + 1) * 4


class TorchftDiLoCo:
    """torchft's DiLoCo: one replica group per rank, the config's optimizer inside.

    Use as a context manager around the training loop (torchft's own pattern:
    its hooks on the inner optimizer run the rounds)."""

    def __init__(self, model, make_optimizer, rank, world, period, fragments_count, delay, nesterov):
        import torchft
        from torchft._torchft import LighthouseServer
        from torchft.local_sgd import DiLoCo
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        self.version = getattr(torchft, "__version__", None) or _version("torchft")
        self.model = model
        self.optimizer = make_optimizer(model.parameters())
        master = os.environ["MASTER_ADDR"]
        if rank == 0:
            self._lighthouse = LighthouseServer(bind=f"[::]:{LIGHTHOUSE_PORT}", min_replicas=world)
        # Every rank waits here until rank 0's lighthouse is up.
        dist.barrier()
        me = own_address()
        self._store = dist.TCPStore(me, STORE_PORT + rank, is_master=True, wait_for_workers=False)
        self.sent = 0
        self.manager = Manager(
            pg=ProcessGroupGloo(timeout=TIMEOUT), min_replica_size=world, load_state_dict=self._load,
            state_dict=self._state, replica_id=f"peer{rank}", store_addr=me, store_port=STORE_PORT + rank,
            rank=0, world_size=1, lighthouse_addr=f"http://{master}:{LIGHTHOUSE_PORT}", port=MANAGER_PORT + rank,
            hostname=me, use_async_quorum=False, init_sync=False, timeout=TIMEOUT, quorum_timeout=TIMEOUT,
            connect_timeout=timedelta(seconds=120))
        allreduce = self.manager.allreduce

        self.fp8_sent = 0  # what torchft's fp8 path would have sent (None: a tensor it refuses)

        def counted(tensor, *args, **kwargs):
            self.sent += tensor.numel() * tensor.element_size()
            fp8 = torchft_fp8_bytes(tuple(tensor.shape), world)
            self.fp8_sent = None if self.fp8_sent is None or fp8 is None else self.fp8_sent + fp8
            return allreduce(tensor, *args, **kwargs)
        self.manager.allreduce = counted
        parts = fragments(model, fragments_count)
        outer = [torch.optim.SGD(f.parameters(), lr=0.7, momentum=0.9, nesterov=True) if nesterov
                 else torch.optim.SGD(f.parameters(), lr=1.0) for f in parts]
        self.diloco = DiLoCo(self.manager, parts, self.optimizer, outer, sync_every=period,
                             fragment_sync_delay=delay, fragment_update_alpha=0.5 if delay else 0.0)

    def _load(self, state):
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def _state(self):
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def __enter__(self):
        self.diloco.__enter__()
        return self

    def __exit__(self, *exc):
        self.diloco.__exit__(*exc)
        self.manager.shutdown(wait=False)
        return False


def _version(package):
    from importlib.metadata import version
    return version(package)


def describe(kind, settings):
    """What the run directory records of the baseline."""
    if kind == "postlocal":
        return f"torch post-local SGD, period {settings['period']}, warm-up {settings['warmup']}"
    return (f"torchft {_version('torchft')} DiLoCo, sync_every {settings['period']}, "
            f"{settings['fragments']} fragment(s), delay {settings['delay']}, "
            f"outer {'Nesterov 0.7/0.9' if settings['nesterov'] else 'averaging (SGD lr 1)'}")

