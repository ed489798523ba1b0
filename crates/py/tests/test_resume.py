"""A hook's checkpoint resumes bit-exactly: 12 steps straight, or 5 steps, a
checkpoint (model, optimizer, hook state), and 7 more in a fresh process
group whose DDP cuts its buckets anew, end in the same parameters."""
import pytest

CASES = [
    ("topk", {"density": 0.05}),
    ("terngrad", {}),
    ("powersgd", {"rank": 2, "start_iter": 2}),
    ("dgck", {"density": 0.05}),
    ("signum", {}),
    ("randk", {"density": 0.05}),
    ("eightbit", {}),
]


@pytest.mark.parametrize("name,options", CASES, ids=[c[0] for c in CASES])
def test_resume_is_bit_exact(ddp, tmp_path, name, options):
    base = {"id": name, "name": name, "options": options, "steps": 12, "bucket_cap_mb": 0.01}
    straight = ddp([dict(base, checkpoint_at=5)], 2, "straight")
    ck_dir = str(tmp_path / "straight")
    resumed = ddp([dict(base, resume_from=ck_dir)], 2, "resumed")
    for r in straight + resumed:
        assert "error" not in r[name], r[name].get("error")
    assert straight[0][name]["losses"][5:] == resumed[0][name]["losses"]
    assert straight[0][name]["digest"] == resumed[0][name]["digest"]
    assert straight[1][name]["digest"] == resumed[1][name]["digest"]
