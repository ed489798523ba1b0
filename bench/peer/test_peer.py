"""The race's bookkeeping (issue #38): table.py's medians, projections and
compute-bound time, predict.py's local-update pricing and partition,
torch_local.py's names and fragments. Pure Python and torch, no network:
scripts/test-python.sh runs it beside the package's tests."""
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import predict  # noqa: E402
import table  # noqa: E402
import torch_local  # noqa: E402


def write_run(root, name, rows):
    d = root / name
    d.mkdir()
    (d / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def row(steps, ppl, wall, sent=4000, **extra):
    return {"steps": steps, "test_perplexity": ppl, "wall_seconds": wall, "bytes_sent": sent, **extra}


def test_median_over_seeds_projection_and_the_compute_bound_time(tmp_path, capsys):
    m = "ptb-lstm-local"  # target perplexity 350
    # gradcomp: three seeds at 100 Mbit/s, reaching 350 at 100, 120 and 90 s.
    for seed, wall in ((1, 100.0), (2, 120.0), (3, 90.0)):
        suffix = "" if seed == 1 else f"-s{seed}"
        write_run(tmp_path, f"peer-{m}-gradcomp-local-sgd-h32-p4-d1-fp4-100mbit{suffix}",
                  [row(300, 500.0, wall / 2), row(600, 349.0, wall)])
    # PyTorch: capped at 10 Mbit/s after 100 steps of 2 s; the same method reached 350 at step
    # 600 unshaped, so its projection is 600 × 2 s.
    write_run(tmp_path, f"peer-{m}-torchft-diloco-h32-p4-d1-10mbit",
              [row(100, 800.0, 200.0, capped_at_seconds=200.0)])
    # A warm-up's slow steps stay out of a projection: 50 steps of 8 s, then 50 of 2 s; 600 needed.
    write_run(tmp_path, f"peer-{m}-torch-postlocal-h32-10mbit", [row(50, 900.0, 400.0), row(100, 800.0, 500.0)])
    write_run(tmp_path, f"peer-{m}-torch-postlocal-h32-none", [row(600, 349.0, 90.0)])
    write_run(tmp_path, f"peer-{m}-torchft-diloco-h32-p4-d1-none", [row(600, 349.0, 60.0)])
    write_run(tmp_path, f"peer-{m}-none-none", [row(500, 340.0, 75.0)])
    write_run(tmp_path, f"peer-{m}-torch-powersgd-r4-100mbit", [row(534, 349.5, 250.0)])
    runs = table.load(tmp_path)
    goal = table.Goal(m)
    g, t = table.table(runs, m, "100mbit", goal)
    assert (g["method"], g["median"], g["range"], g["seeds"]) == ("gradcomp-local-sgd-h32-p4-d1-fp4", 100.0,
                                                                  (90.0, 120.0), 3)
    assert (t["method"], t["median"]) == ("torch-powersgd-r4", 250.0)
    # The compute-bound time: the least unshaped time to target of any method.
    assert table.compute_bound(runs, m, goal) == (60.0, "torchft-diloco-h32-p4-d1")
    _, t10 = table.table(runs, m, "10mbit", goal)
    assert not t10["reached"] and t10["method"] == "torchft-diloco-h32-p4-d1"
    assert t10["median"] == pytest.approx(600 * 2.0)
    post = [s for s in table.cell_methods(runs, m, "10mbit", goal) if s["method"] == "torch-postlocal-h32"][0]
    assert post["median"] == pytest.approx(500.0 + 500 * 2.0)
    out = capsys.readouterr().out
    assert "not reached (projected 1200.0) (capped)" in out
    assert table.targets("100mbit", 2.5, 1.0) == "met"
    assert table.targets("100mbit", 2.5, 1.2) == "missed"
    assert table.targets("10mbit", 2.5, 1.0) == "missed"
    assert table.targets("1gbit", 1 / 1.04, None) == "met"
    assert table.targets("none", 1 / 1.06, None) == "missed"


def test_names_parse_into_their_settings():
    assert torch_local.parse("torch-postlocal-h8") == ("postlocal", {"period": 8, "warmup": 10})
    assert torch_local.parse("torch-postlocal-h32-w0") == ("postlocal", {"period": 32, "warmup": 0})
    assert torch_local.parse("torchft-diloco-h32-p4-d1") == (
        "torchft", {"period": 32, "fragments": 4, "delay": 1, "nesterov": False})
    assert torch_local.parse("torchft-diloco-h8-nesterov")[1]["nesterov"]
    assert torch_local.parse("torch-powersgd-r4") is None
    assert predict.local_settings("gradcomp-local-sgd-h32-p4-d4-fp4") == ("gradcomp", 32, 4, 4, "fp4")
    assert predict.local_settings("gradcomp-local-sgd-h32") == ("gradcomp", 32, 1, 0, "dense")
    assert predict.local_settings("torch-postlocal-h8") == ("postlocal", 8, 1, 0, 10)
    assert predict.local_settings("none") is None


def test_run_names_parse_with_their_seed_and_find_their_unshaped_twin(tmp_path):
    m = "ptb-gpt"
    assert table.parse_name(f"peer-{m}-gradcomp-local-sgd-h32-p4-d1-fp4-100mbit-s2.evals.jsonl") == {
        "kind": "peer", "model": m, "method": "gradcomp-local-sgd-h32-p4-d1-fp4", "rate": "100mbit",
        "seed": 2, "name": f"peer-{m}-gradcomp-local-sgd-h32-p4-d1-fp4-100mbit-s2"}
    assert table.parse_name(f"tta-{m}-streaming-sgd-h32-p4-d1-fp4-10mbit")["seed"] == 1
    assert table.parse_name(f"peer-{m}-none-none.log") is None
    assert table.parse_name(f"peer-{m}-none-none.config.toml") is None
    # A seed's own unshaped run stands for its compute; without one, seed 1's, then any seed's.
    for name in ("torchft-diloco-h32-p4-d1-none", "torchft-diloco-h32-p4-d1-none-s3",
                 "gradcomp-local-sgd-h32-p4-d1-fp4-none-s2"):
        write_run(tmp_path, f"peer-{m}-{name}", [row(10, 400.0, 1.0)])
    twin = predict.unshaped_twin
    assert twin(tmp_path, m, "torchft-diloco-h32-p4-d1", 3).endswith("-none-s3")
    assert twin(tmp_path, m, "torchft-diloco-h32-p4-d1", 2).endswith("d1-none")
    assert twin(tmp_path, m, "torch-postlocal-h32", 1).endswith("d1-none")
    assert twin(tmp_path, m, "gradcomp-local-sgd-h32-p4-d4-fp4", 1).endswith("fp4-none-s2")
    assert twin(tmp_path, m, "torch-powersgd-r4", 1) is None


def test_post_local_sgd_bytes_follow_torchs_averager_schedule():
    pl = object.__new__(torch_local.PostLocal)
    pl.period, pl.warmup, pl.params = 4, 2, 10
    # Steps 0, 1 allreduce the gradients; the averager runs at steps 2, 6, 10.
    assert [pl.step_bytes(s) for s in range(11)] == [40, 40, 40, 0, 0, 0, 40, 0, 0, 0, 40]


def test_fragments_are_contiguous_cover_every_module_once_and_balance():
    model = torch.nn.Sequential(torch.nn.Linear(100, 100), torch.nn.Linear(100, 10), torch.nn.Linear(10, 10),
                                torch.nn.Linear(10, 100), torch.nn.Linear(100, 100))
    parts = torch_local.fragments(model, 3)
    assert len(parts) == 3
    flat = [m for p in parts for m in p]
    assert flat == list(model)
    assert all(len(p) >= 1 for p in parts)
    with pytest.raises(SystemExit):
        torch_local.fragments(model, 6)
    assert torch_local.partition([10, 10, 10, 10], 2) == [[0, 1], [2, 3]]
    assert torch_local.partition([100, 1, 1, 1], 4) == [[0], [1], [2], [3]]


def test_local_pricing_hides_a_round_behind_its_delay():
    def wire(rate, calls):
        return sum(b for _, b in calls) / 1e6  # a second per MB

    sizes = [250_000, 250_000]  # 2 MB dense per period, two fragments of 1 MB
    blocking = predict.predict_local(wire, "100mbit", ("gradcomp", 10, 2, 0, "dense"), sizes, 0.1, 100, 0)
    assert blocking == pytest.approx(100 * 0.1 + 10 * 2.0)
    hidden = predict.predict_local(wire, "100mbit", ("gradcomp", 10, 2, 4, "dense"), sizes, 0.1, 100, 0)
    assert hidden == pytest.approx(100 * 0.1 + 10 * 2 * (1.0 - 0.4))
    # Post-local SGD: two warm-up steps of gradients, then an average every 5 steps from step 2.
    post = predict.predict_local(wire, "100mbit", ("postlocal", 5, 1, 0, 2), sizes, 0.1, 12, 0)
    assert post == pytest.approx(12 * 0.1 + 2 * 2.0 + 2 * 2.0)
