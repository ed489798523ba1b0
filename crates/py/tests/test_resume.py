"""A hook's checkpoint resumes bit-exactly: 12 steps straight, or 5 steps, a
checkpoint (model, optimizer, hook state), and 7 more in a fresh process
group whose DDP cuts its buckets anew, end in the same parameters."""
from typing import Any
import pytest

CASES = [
    ("topk", {"density": 0.05}),
    ("terngrad", {}),
    ("powersgd", {"matrix_approximation_rank": 2, "start_iter": 2}),
    ("dgck", {"density": 0.05}),
    ("signum", {}),
    ("randk", {"density": 0.05}),
    ("eightbit", {}),
    ("sparseloco", {}),
    ("dct-topk", {}),
]


@pytest.mark.parametrize("name,options", CASES, ids=[c[0] for c in CASES])
def test_resume_is_bit_exact(ddp: Any, tmp_path: Any, name: Any, options: Any) -> None:
    base = {"id": name, "name": name, "options": options, "steps": 12, "bucket_cap_mb": 0.01}
    straight = ddp([dict(base, checkpoint_at=5)], 2, "straight")
    ck_dir = str(tmp_path / "straight")
    resumed = ddp([dict(base, resume_from=ck_dir)], 2, "resumed")
    for r in straight + resumed:
        assert "error" not in r[name], r[name].get("error")
    assert straight[0][name]["losses"][5:] == resumed[0][name]["losses"]
    assert straight[0][name]["digest"] == resumed[0][name]["digest"]
    assert straight[1][name]["digest"] == resumed[1][name]["digest"]


KEEPABLE = r'''
import copy, io, pickle, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import gradcomp.torch as gt
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
torch.manual_seed(0)
def steps(state, n):
    torch.manual_seed(1)
    m = DDP(torch.nn.Linear(16, 4))
    m.register_comm_hook(state, gt.exchange_hook)
    for _ in range(n):
        m(torch.randn(8, 16)).pow(2).sum().backward()
    return m
state, _ = gt.hook("topk", density=0.25)
steps(state, 3)
saved = state.state_dict()
assert (saved["rank"], saved["world_size"]) == (0, 1), saved
buf = io.BytesIO()
torch.save(saved, buf)
buf.seek(0)
back = torch.load(buf)  # weights_only=True, torch's default
fresh, _ = gt.hook("topk", density=0.25)
fresh.load_state_dict(back)
assert fresh.iteration == 3
for other in (pickle.loads(pickle.dumps(state)), copy.deepcopy(state)):
    assert other.iteration == 3 and other.state_dict()["units"].keys() == saved["units"].keys()
    steps(other, 1)  # registered again on a new model, it steps
    assert other.iteration == 4
foreign = dict(saved, rank=1, world_size=2)
try:
    fresh.load_state_dict(foreign)
    print("accepted")
except ValueError as e:
    print("refused:", e)
'''


def test_the_hook_state_is_a_checkpoint_a_ddp_user_can_keep() -> None:
    from conftest import free_port, run_ranks
    out = run_ranks(KEEPABLE % free_port(), 1, timeout=180)[0]
    assert out.code == 0, out.out + out.err
    assert "refused:" in out.out and "saved by rank 1 of 2" in out.out, out.out + out.err
