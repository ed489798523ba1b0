"""The race's bookkeeping (issues #38 and #51): table.py's medians, paired
ratios, projections over whole periods and lower bound, predict.py's local-update pricing and partition,
torch_local.py's names and fragments. Pure Python and torch, no network:
scripts/test-python.sh runs it beside the package's tests."""
import json
import os
import statistics
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import predict  # noqa: E402
import sitting  # noqa: E402
import table  # noqa: E402
import torch_local  # noqa: E402
import train  # noqa: E402


def write_run(root, name, rows):
    d = root / name
    d.mkdir()
    (d / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def row(steps, ppl, wall, sent=4000, **extra):
    return {"steps": steps, "test_perplexity": ppl, "wall_seconds": wall, "bytes_sent": sent, **extra}


def test_median_over_seeds_and_projections_over_whole_periods(tmp_path, capsys):
    m = "ptb-lstm-local"  # target perplexity 350
    # gradcomp: three seeds at 100 Mbit/s, reaching 350 at 100, 120 and 90 s.
    for seed, wall in ((1, 100.0), (2, 120.0), (3, 90.0)):
        suffix = "" if seed == 1 else f"-s{seed}"
        write_run(tmp_path, f"peer-{m}-gradcomp-local-sgd-h32-p4-d1-fp4-100mbit{suffix}",
                  [row(300, 500.0, wall / 2), row(600, 349.0, wall)])
    # PyTorch: capped at 10 Mbit/s after 100 steps. Its last 100 steps' seconds: a
    # round's step (H = 32) of 10 s every 32 steps, the others 1 s. The pace is read
    # over whole periods (96 steps, three rounds): (3 × 10 + 93) / 96, not the last
    # 64 steps' nor the recorded recent pace. It reached 350 at step 600 unshaped.
    steps = [10.0 if (s + 1) % 32 == 0 else 1.0 for s in range(100)]
    write_run(tmp_path, f"peer-{m}-torchft-diloco-h32-p4-d1-10mbit",
              [row(100, 800.0, sum(steps), capped_at_seconds=200.0, recent_seconds_per_step=1.0,
                   step_seconds=steps)])
    # Without step_seconds, two evaluations whole periods apart after the warm-up:
    # post-local SGD's 10 dense steps (the default), then H = 32; rows at 10, 74
    # and 106 steps: the window 10..106 (three periods), not 74..106 (one).
    write_run(tmp_path, f"peer-{m}-torch-postlocal-h32-10mbit",
              [row(10, 900.0, 400.0), row(74, 850.0, 464.0), row(106, 800.0, 512.0, capped_at_seconds=500)])
    # No evaluations whole periods apart: not projected.
    write_run(tmp_path, f"peer-{m}-torchft-diloco-h32-10mbit",
              [row(50, 900.0, 400.0), row(100, 850.0, 500.0), row(120, 800.0, 540.0, capped_at_seconds=500)])
    for method, wall in (("torch-postlocal-h32", 90.0), ("torchft-diloco-h32-p4-d1", 60.0),
                         ("torchft-diloco-h32", 70.0)):
        write_run(tmp_path, f"peer-{m}-{method}-none", [row(600, 349.0, wall)])
    write_run(tmp_path, f"peer-{m}-torch-powersgd-r4-100mbit", [row(534, 349.5, 250.0)])
    runs = table.load(tmp_path)
    goal = table.Goal(m)
    g, t = table.table(runs, m, "100mbit", goal)
    assert (g["method"], g["median"], g["range"], g["seeds"]) == ("gradcomp-local-sgd-h32-p4-d1-fp4", 100.0,
                                                                  (90.0, 120.0), 3)
    assert (t["method"], t["median"]) == ("torch-powersgd-r4", 250.0)
    _, t10 = table.table(runs, m, "10mbit", goal)
    assert not t10["reached"] and t10["method"] == "torchft-diloco-h32-p4-d1"
    assert t10["median"] == pytest.approx(sum(steps) + 500 * (3 * 10 + 93) / 96)
    cell = {s["method"]: s for s in table.cell_methods(runs, m, "10mbit", goal)}
    assert cell["torch-postlocal-h32"]["median"] == pytest.approx(512.0 + 494 * (512.0 - 400.0) / 96)
    assert cell["torchft-diloco-h32"]["median"] is None
    out = capsys.readouterr().out
    assert "(capped; no pace over whole periods)" in out
    assert "paired per seed: seed 1: 2.50." in out  # PyTorch ran seed 1 only
    # The schedules the pace reads.
    assert table.schedule("gradcomp-local-sgd-h8-w10-bn-fp4") == (8, 10)
    assert table.schedule("streaming-sgd-h32-p4-d1-fp4") == (32, 0)
    assert table.schedule("torch-postlocal-h8-w0") == (8, 0)
    assert table.schedule("torch-powersgd-r4") == (1, train.POWERSGD_START)
    assert table.schedule("torch-batched-powersgd-r2-s50") == (1, 50)
    assert train.powersgd_settings("torch-powersgd-r4-s28") == (4, 28)
    assert train.powersgd_settings("torch-batched-powersgd-r2") == (2, train.POWERSGD_START)
    assert table.schedule("gradcomp:topk") == (1, 0)
    assert table.POSTLOCAL_WARMUP == torch_local.POSTLOCAL_WARMUP


def test_the_lower_bound_interpolates_the_fewest_steps_and_takes_the_fastest_isolated_step(tmp_path):
    m = "ptb-lstm-local"
    # Perplexity 400 at step 400 and 300 at 500: 350 is crossed at 450.
    write_run(tmp_path, f"peer-{m}-none-none", [row(400, 400.0, 40.0), row(500, 300.0, 50.0)])
    # Reaches it at its first evaluation: that evaluation's steps (600) count.
    write_run(tmp_path, f"peer-{m}-torch-postlocal-h32-none", [row(600, 349.0, 70.0)])
    write_run(tmp_path, f"peer-{m}-none-100mbit", [row(500, 360.0, 90.0)])  # never reached
    # The communication-free step: each isolated run's mean after its first
    # evaluation, the fastest of them (either framework).
    write_run(tmp_path, f"peer-{m}-isolated-none", [row(50, 900.0, 8.0), row(150, 800.0, 20.0)])
    write_run(tmp_path, f"peer-{m}-isolated-none-s2", [row(50, 900.0, 6.0), row(150, 800.0, 19.0)])
    write_run(tmp_path, f"tta-{m}-isolated-none", [row(100, 900.0, 30.0)])
    runs = table.load(tmp_path)
    goal = table.Goal(m)
    bound = table.lower_bound(runs, m, goal)
    assert bound["steps"] == pytest.approx(450.0) and bound["steps_run"] == f"peer-{m}-none-none"
    assert bound["step"] == pytest.approx(0.12) and bound["step_run"] == f"peer-{m}-isolated-none"
    assert bound["seconds"] == pytest.approx(54.0)
    # Isolated runs race nothing: they are no cell's method.
    assert [s["method"] for s in table.cell_methods(runs, m, "none", goal)] == ["none", "torch-postlocal-h32"]
    accuracy = table.Goal("fashion-resnet18")  # 70%, from below
    assert table.interpolated_steps({"rows": [row(25, 0, 1, test_accuracy=0.6),
                                              row(50, 0, 2, test_accuracy=0.8)]}, accuracy) == pytest.approx(37.5)
    # A cell whose runs timed their own free step takes the least of those, not the
    # isolated runs' (another session's machine): 450 steps × 0.1 s.
    write_run(tmp_path, f"peer-{m}-gradcomp-local-h32-fp4-100mbit", [row(500, 360.0, 80.0, free_step_seconds=0.1)])
    write_run(tmp_path, f"peer-{m}-torchft-diloco-h32-100mbit", [row(500, 360.0, 80.0, free_step_seconds=0.13)])
    cell = table.lower_bound(table.load(tmp_path), m, goal, "100mbit")
    assert cell["step"] == 0.1 and cell["step_run"] == f"peer-{m}-gradcomp-local-h32-fp4-100mbit"
    assert cell["seconds"] == pytest.approx(45.0)
    # The unshaped cell has none of its own: the isolated runs' step.
    assert table.lower_bound(table.load(tmp_path), m, goal, "none")["step"] == pytest.approx(0.12)
    for name in ("gradcomp-local-h32-fp4", "torchft-diloco-h32"):
        (tmp_path / f"peer-{m}-{name}-100mbit" / "evals.jsonl").unlink()
    # Without an isolated run there is no bound.
    (tmp_path / f"peer-{m}-isolated-none" / "evals.jsonl").unlink()
    (tmp_path / f"peer-{m}-isolated-none-s2" / "evals.jsonl").unlink()
    (tmp_path / f"tta-{m}-isolated-none" / "evals.jsonl").unlink()
    assert table.lower_bound(table.load(tmp_path), m, goal) is None


def test_ratios_are_paired_per_seed_and_a_verdict_needs_three_reached_pairs(tmp_path):
    m = "ptb-gpt"
    g = {"runs": [{"seed": 1}, {"seed": 2}, {"seed": 3}],
         "outs": [(100.0, 500, 0.2, None, {}), (110.0, 500, 0.22, None, {}), (None, 400, 0.2, 120.0, {})]}
    t = {"runs": [{"seed": 1}, {"seed": 3}], "outs": [(130.0, 500, 0.26, None, {}), (150.0, 500, 0.3, None, {})]}
    assert table.pairs(g, t) == [(1, 1.3, ""), (3, 1.25, "*")]
    # A pair whose runs timed free steps more than 25% apart ran on a machine whose speed
    # had moved (a cell split over sessions): marked, and it carries no verdict.
    t2 = {"runs": [{"seed": 1}, {"seed": 2}],
          "outs": [(130.0, 500, 0.26, None, {"free_step_seconds": 0.2}),
                   (150.0, 500, 0.3, None, {"free_step_seconds": 0.2})]}
    g2 = {"runs": [{"seed": 1}, {"seed": 2}],
          "outs": [(100.0, 500, 0.2, None, {"free_step_seconds": 0.24}),
                   (100.0, 500, 0.2, None, {"free_step_seconds": 0.3})]}
    assert table.pairs(g2, t2) == [(1, 1.3, ""), (2, 1.5, "†")]
    assert table.verdict("100mbit", [(1, 1.6, ""), (2, 1.5, "")], 1.0, 1.0) == "no verdict (2 pairs)"
    assert table.verdict("100mbit", [(1, 1.6, ""), (2, 1.5, ""), (3, 2.0, "*")], 1.0, 1.0) == \
        "no verdict (3 pairs, projected)"
    assert table.verdict("100mbit", [(1, 1.6, "†"), (2, 1.5, ""), (3, 2.0, "*†")], 1.0, 1.0) == \
        "no verdict (3 pairs, projected, machine drift)"
    three = [(1, 1.6, ""), (2, 1.4, ""), (3, 1.55, "")]  # median 1.55
    assert table.verdict("100mbit", three, 1.2, 1.05) == "met"
    assert table.verdict("100mbit", three, 1.31, 1.05) == "missed"  # past 1.3× the bound
    assert table.verdict("100mbit", three, 1.2, 1.11) == "missed"  # past 1.10× its own steps
    assert table.verdict("10mbit", three, 1.2, 1.05) == "missed"  # short of 3×
    assert table.verdict("1gbit", [(1, 0.96, ""), (2, 0.9, ""), (3, 1.2, "")], None, None) == "met"
    assert table.verdict("none", [(1, 0.94, ""), (2, 0.9, ""), (3, 1.2, "")], None, None) == "missed"
    # Own steps: a method's time ÷ (its steps × the communication-free step), median over reached seeds.
    assert table.own_steps(g, 0.19) == pytest.approx(statistics.median([100 / 95, 110 / 95]))
    assert table.own_steps(g, None) is None
    del m


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


def test_predictions_count_only_where_the_model_priced_the_wire():
    errors = [("a", "10mbit", 0.05, True), ("b", "100mbit", -0.2, True), ("c", "1gbit", 0.01, False),
              ("d", "1gbit", -0.5, False)]
    out = predict.summary(errors)
    assert "1 of 2 predictions within 15%" in out and "2 more are their twin's measured step" in out
    assert "the largest error -20% (b, 100mbit)" in out
    assert "no run's prediction" in predict.summary(errors[2:])


def test_torchft_fp8_bytes_follow_its_row_layout():
    # A 10 × 6 weight in a group of 4: rows padded to 12, each a 4-byte scale and
    # 6 fp8 values padded to 8 bytes: 12 × 12.
    assert torch_local.torchft_fp8_bytes((10, 6), 4) == 144
    # A bias of 5: 8 rows of one value, 8 bytes each (more than its 20 bytes in fp32).
    assert torch_local.torchft_fp8_bytes((5,), 4) == 64
    assert torch_local.torchft_fp8_bytes((8, 3, 3, 3), 4) is None  # its kernels take 2-D only


@pytest.mark.parametrize("under", ["", "faults"])  # faults.sh's OUT, or race-51.sh's OUT/faults
def test_the_faults_column_pairs_a_faulted_run_with_its_twin(tmp_path, capsys, under):
    def run(name, faulted, seconds, committed):
        d = tmp_path / under / name
        d.mkdir(parents=True)
        # The faulted run planned 120 steps and computed 100: its capacity is 120 worker-steps.
        driver = [{"kind": "run", "framework": "gradcomp", "faults": faulted, "round_timeout": 5.0, "seed": 2,
                   "config": "experiments/tta-ptb-lstm-local.toml", "steps": 120 if faulted else 100, "t": 0.0},
                  {"kind": "t0", "at": 0.0}]
        (d / "driver.jsonl").write_text("".join(json.dumps(r) + "\n" for r in driver))
        steps = [{"kind": "step", "t": float(i)} for i in range(100)]
        rounds = [{"kind": "round", "t": 50.0, "committed": True, "healed": False, "computed": committed,
                   "workers": 4, "seconds": 0.5}, {"kind": "end", "t": 100.0}]
        (d / "w1.1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps + rounds))
        (d / "evals.jsonl").write_text(json.dumps({"steps": 90, "test_perplexity": 340.0, "seconds": seconds}) + "\n")

    run("gradcomp-nofaults", False, 100.0, 100)
    run("gradcomp-faults", True, 120.0, 96)
    table.faults_section(tmp_path)
    out = capsys.readouterr().out
    assert "| gradcomp-faults | ptb-lstm-local | gradcomp | 2 | yes | 120.0 | 1.20 | 96.0% | 80.0% | met |" in out
    assert "| gradcomp-nofaults | ptb-lstm-local | gradcomp | 2 | no | 100.0 |  | 100.0% | 100.0% |  |" in out


def test_the_tuning_pick_takes_the_least_time_then_the_fewer_bytes_within_two_percent(tmp_path, capsys):
    m = "ptb-gpt"  # target perplexity 485
    for method, wall, sent in (("gradcomp-local-sgd-h32-fp4", 100.0, 9000), ("gradcomp-local-h32-fp4", 101.5, 4000),
                               ("gradcomp-local-sgd-h16-p4-d1-fp4", 90.0, 8000),
                               ("torchft-diloco-h32", 120.0, 4000)):
        write_run(tmp_path, f"peer-{m}-{method}-100mbit-s9", [row(280, 480.0, wall, sent=sent)])
    # 90 s is the least; 100 and 101.5 are not within 2% of it, so the fewer bytes do not count.
    runs = table.load(tmp_path)
    methods = table.cell_methods(runs, m, "100mbit", table.Goal(m))
    chosen, ranking, unit = table.pick([s for s in methods if s["method"].startswith("gradcomp-local-")])
    assert chosen["method"] == "gradcomp-local-sgd-h16-p4-d1-fp4" and len(ranking) == 3 and unit == "s"
    # Within 2% of the least (100 against 101.5), the fewer bytes per worker-step win.
    chosen, *_ = table.pick([s for s in methods if s["method"] in ("gradcomp-local-sgd-h32-fp4",
                                                                    "gradcomp-local-h32-fp4")])
    assert chosen["method"] == "gradcomp-local-h32-fp4"
    table.print_picks(runs)
    out = capsys.readouterr().out
    assert "ptb-gpt, torchft DiLoCo: pick **torchft-diloco-h32**" in out
    # The cells read the picks as shell assignments, and refuse a family without one.
    with pytest.raises(SystemExit, match="RACE_POSTLOCAL"):
        table.pick_env(runs, m)
    write_run(tmp_path, f"peer-{m}-torch-postlocal-h32-w30-100mbit-s9", [row(280, 480.0, 200.0)])
    assert table.pick_env(table.load(tmp_path), m) == \
        "RACE_GRADCOMP=gradcomp-local-sgd-h16-p4-d1-fp4 RACE_TORCHFT=torchft-diloco-h32 " \
        "RACE_POSTLOCAL=torch-postlocal-h32-w30"
    # A cell's seeds, raced with the picks, move no pick (a cell of this model run later
    # races the same points): a faster torchft point on seed 1 is not ranked.
    write_run(tmp_path, f"peer-{m}-torchft-diloco-h32-nesterov-100mbit-s1", [row(280, 480.0, 50.0)])
    assert "RACE_TORCHFT=torchft-diloco-h32 " in table.pick_env(table.load(tmp_path), m)
    assert table.pick([]) == (None, [], "s")
    with pytest.raises(SystemExit, match="no model 'nosuch'"):
        table.pick_env(runs, "nosuch")
    with pytest.raises(SystemExit, match="not a directory of run records"):
        table.load(tmp_path / "missing")
    args = ["OUT", "--pick-env"]
    with pytest.raises(SystemExit, match="--pick-env needs a value"):
        table.take(args, "--pick-env")
    args = ["OUT", "--svg", "f.svg"]
    assert table.take(args, "--svg") == "f.svg" and args == ["OUT"] and table.take(args, "--svg") is None


def test_the_pick_counts_each_runs_own_free_steps_across_sessions(tmp_path, capsys):
    """Two points run in sessions whose machine speed differs: in seconds the one from the
    fast session wins; in its own free steps (time ÷ `free_step_seconds`) the other does."""
    m = "ptb-gpt"
    write_run(tmp_path, f"peer-{m}-gradcomp-local-h32-fp4-100mbit-s9",
              [row(280, 480.0, 100.0, free_step_seconds=0.25)])  # a fast session: 400 free steps
    write_run(tmp_path, f"peer-{m}-gradcomp-local-sgd-h32-fp4-100mbit-s9",
              [row(280, 480.0, 150.0, free_step_seconds=0.5)])  # a slow one: 300 free steps
    runs = table.load(tmp_path)
    methods = table.cell_methods(runs, m, "100mbit", table.Goal(m))
    chosen, ranking, unit = table.pick(methods)
    assert unit == "free steps" and chosen["method"] == "gradcomp-local-sgd-h32-fp4"
    assert [s["free_steps"] for s in ranking] == [300.0, 400.0]
    table.print_picks(runs)
    assert "= 300 free steps" in capsys.readouterr().out
    # Own steps read each run's own step before the bound's: 150 ÷ (280 × 0.5).
    slow = next(s for s in methods if s["method"] == "gradcomp-local-sgd-h32-fp4")
    assert table.own_steps(slow, 0.1) == pytest.approx(150 / 140)
    # One point without the field: the ranking falls back to seconds, and says so.
    write_run(tmp_path, f"peer-{m}-gradcomp-local-h16-fp4-100mbit-s9", [row(280, 480.0, 120.0)])
    methods = table.cell_methods(table.load(tmp_path), m, "100mbit", table.Goal(m))
    chosen, _, unit = table.pick(methods)
    assert unit == "s" and chosen["method"] == "gradcomp-local-h32-fp4"


def fake_faults_py(tmp_path, fails=""):
    """A stand-in for faults.sh's Python (PEER_PYTHON), called as `faults.py run --framework F
    --out DIR …` (it makes DIR/driver.jsonl) or `faults.py eval DIR`: each call appended to the
    returned file as `run NAME` or `eval NAME`; the call `fails` (e.g. "run NAME") exits 1."""
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\ncase $2 in run) d=$6; mkdir -p "$d"; : > "$d/driver.jsonl" ;; *) d=$3 ;; esac\n'
                    f'echo "$2 $(basename "$d")" >> {calls}\n'
                    f'[ "$2 $(basename "$d")" != "{fails}" ]\n')
    fake.chmod(0o755)
    return fake, calls


def test_faults_sh_resumes_run_by_run_and_evaluates_what_was_not(tmp_path):
    """The race's faults phase outlasts a session: with FAULTS_RESUME a run whose driver
    recorded its end is kept, one without evaluations is evaluated, and one cut short is made
    again; without it every run is made again."""
    import subprocess
    fake, calls = fake_faults_py(tmp_path)
    out = tmp_path / "out"
    for name, done, evals in [("gradcomp-nofaults", True, True), ("gradcomp-faults", True, False),
                              ("gradcomp-nofaults-s2", False, False)]:
        (out / name).mkdir(parents=True)
        lines = [{"kind": "t0", "at": 0.0}] + ([{"kind": "done", "rc": {}}] if done else [])
        (out / name / "driver.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        if evals:
            (out / name / "evals.jsonl").write_text("")
    script = os.path.join(os.path.dirname(__file__), "faults.sh")

    def phase(**env):
        calls.write_text("")
        subprocess.run([script, str(out), "gradcomp"], check=True, capture_output=True,
                       env={**os.environ, "PEER_PYTHON": str(fake), "FAULTS_SEEDS": "1 2", **env})
        # The fake writes no evals.jsonl, so every run made is evaluated after it.
        return calls.read_text().splitlines()

    records = tmp_path / "records"
    assert phase(FAULTS_RESUME="1", FAULTS_RECORDS=str(records)) == [
        "eval gradcomp-faults",
        "run gradcomp-nofaults-s2", "eval gradcomp-nofaults-s2",
        "run gradcomp-faults-s2", "eval gradcomp-faults-s2"]
    # Each run's record (its .jsonl files) is left in FAULTS_RECORDS as it ends.
    assert (records / "gradcomp-nofaults" / "evals.jsonl").exists()
    assert (records / "gradcomp-faults" / "driver.jsonl").exists()
    assert [c for c in phase() if c.startswith("run")] == [
        "run gradcomp-nofaults", "run gradcomp-faults", "run gradcomp-nofaults-s2", "run gradcomp-faults-s2"]
    # A session's end: a faulted run starts while its own limit (900 s) fits, one without
    # faults only while its faulted twin's fits after it, so a pair runs on one machine; a
    # faulted run whose twin did not run (its schedule's source) is not started either.
    import time
    (out / "gradcomp-nofaults" / "driver.jsonl").write_text('{"kind": "done", "rc": {}}\n')
    assert phase(FAULTS_RESUME="1", FAULTS_UNTIL=str(int(time.time()) + 1200)) == [
        "run gradcomp-faults", "eval gradcomp-faults"]
    assert phase(FAULTS_RESUME="1", FAULTS_UNTIL=str(int(time.time()) + 600)) == []
    with pytest.raises(subprocess.CalledProcessError) as e:
        phase(FAULTS_UNTIL="20:30")
    assert b"FAULTS_UNTIL must be a time in seconds since the epoch" in e.value.stderr


def test_faults_sh_starts_no_faulted_run_after_its_twin_failed_and_says_a_run_failed(tmp_path):
    """A run that fails (a worker ended before its first step) leaves no twin to take a
    schedule from, or no evaluation to copy: its faulted run is not started, nothing of it
    reaches FAULTS_RECORDS, the next seed runs, and the script's status is 1."""
    import subprocess
    # Seed 1's run without faults fails; every other call succeeds.
    fake, calls = fake_faults_py(tmp_path, fails="run gradcomp-nofaults")
    records = tmp_path / "records"
    script = os.path.join(os.path.dirname(__file__), "faults.sh")
    r = subprocess.run([script, str(tmp_path / "out"), "gradcomp"], capture_output=True,
                       env={**os.environ, "PEER_PYTHON": str(fake), "FAULTS_SEEDS": "1 2",
                            "FAULTS_RECORDS": str(records)})
    assert r.returncode == 1, r.stderr
    assert calls.read_text().splitlines() == [
        "run gradcomp-nofaults",
        "run gradcomp-nofaults-s2", "eval gradcomp-nofaults-s2",
        "run gradcomp-faults-s2", "eval gradcomp-faults-s2"]
    assert b"gradcomp-nofaults: the run failed" in r.stderr and b"faults.sh: a run failed" in r.stderr
    assert not (records / "gradcomp-nofaults").exists()


def test_matrix_sh_resumes_from_committed_records_and_leaves_new_ones(tmp_path):
    """A phase outlasts a session and a session's machine: with MATRIX_RESUME a run whose
    record was copied into a fresh OUT (NAME.evals.jsonl) or that finished there (NAME.done)
    is not run again, and with MATRIX_RECORDS each run that finishes leaves its record."""
    import subprocess
    calls = tmp_path / "calls"
    fake = tmp_path / "netsim.sh"
    # Called as `netsim.sh torch 4 RATE PY train.py … --out DIR …`: a run that writes its record.
    fake.write_text(f'#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --out ] && d=$2; shift; done\n'
                    f'mkdir -p "$d" && echo "{{}}" > "$d/evals.jsonl" && echo "[x]" > "$d/config.toml"\n'
                    f'basename "$d" >> {calls}\n')
    fake.chmod(0o755)
    out, records = tmp_path / "out", tmp_path / "records"
    out.mkdir()
    (out / "peer-ptb-gpt-none-100mbit-s2.evals.jsonl").write_text("{}\n")  # a committed record
    (out / "peer-ptb-gpt-none-100mbit-s3.done").write_text("")  # finished on this machine
    script = os.path.join(os.path.dirname(__file__), "matrix.sh")

    def phase(seeds, **env):
        calls.write_text("")
        subprocess.run([script, "unused-burn-binary", str(out)], check=True, capture_output=True,
                       env={**os.environ, "MATRIX_NETSIM": str(fake), "MATRIX_RESUME": "1",
                            "MATRIX_RECORDS": str(records), "MATRIX_SEEDS": seeds, "MATRIX_BURN": " ",
                            "MATRIX_MODELS": "ptb-gpt", "MATRIX_RATES": "100mbit", "MATRIX_PEER": "none",
                            "MATRIX_CAP": "600", **env})
        return calls.read_text().split()

    assert phase("1 2 3") == ["peer-ptb-gpt-none-100mbit"]
    assert sorted(p.name for p in records.iterdir()) == [
        "peer-ptb-gpt-none-100mbit.config.toml", "peer-ptb-gpt-none-100mbit.evals.jsonl"]
    assert (out / "peer-ptb-gpt-none-100mbit.done").exists()
    # A session's end: a seed whose runs (cap 600 + overhead 300 s each) would end past
    # MATRIX_UNTIL is not started; one that fits runs whole.
    import time
    assert phase("4", MATRIX_UNTIL=str(int(time.time()) + 300)) == []
    assert phase("4", MATRIX_UNTIL=str(int(time.time()) + 1000)) == ["peer-ptb-gpt-none-100mbit-s4"]
    # A seed's runs are the cell's pairs: never split between sessions. Two runs to go where
    # one fits: neither starts (a later seed is not started either); one of the two done: the
    # other fits and runs.
    two = {"MATRIX_PEER": "none torch-fp16", "MATRIX_UNTIL": str(int(time.time()) + 1000)}
    assert phase("5 6", **two) == []
    (out / "peer-ptb-gpt-none-100mbit-s5.done").write_text("")
    assert phase("5", **two) == ["peer-ptb-gpt-torch-fp16-100mbit-s5"]
    # Cap and overhead both count: 2 × (450 + 50) s fits in 1,200 where 2 × (600 + 300) would not
    # (a deadline of its own, with room to spare).
    assert phase("6", MATRIX_PEER=two["MATRIX_PEER"], MATRIX_UNTIL=str(int(time.time()) + 1200),
                 MATRIX_CAP="450", MATRIX_RUN_OVERHEAD="50") == [
        "peer-ptb-gpt-none-100mbit-s6", "peer-ptb-gpt-torch-fp16-100mbit-s6"]
    with pytest.raises(subprocess.CalledProcessError) as e:
        phase("7", MATRIX_RUN_OVERHEAD="5m")
    assert b"MATRIX_RUN_OVERHEAD must be whole seconds" in e.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as e:  # a clock time, not epoch seconds
        phase("5", MATRIX_UNTIL="20:30")
    assert b"MATRIX_UNTIL must be a time in seconds since the epoch" in e.value.stderr


def test_the_tuning_seed_races_in_no_cell(tmp_path, capsys, monkeypatch):
    """race-51.sh tunes on seed 9 and races seeds 1-3: the tuning's runs, in the same
    records, enter neither a cell's table nor its bound."""
    m = "ptb-gpt"
    write_run(tmp_path, f"peer-{m}-gradcomp-local-sgd-h32-fp4-100mbit-s9", [row(200, 480.0, 50.0)])
    write_run(tmp_path, f"peer-{m}-gradcomp-local-h32-fp4-100mbit-s9", [row(100, 480.0, 25.0)])
    write_run(tmp_path, f"peer-{m}-gradcomp-local-sgd-h32-fp4-100mbit", [row(300, 480.0, 90.0)])
    monkeypatch.setattr(sys, "argv", ["table.py", str(tmp_path)])
    table.main()
    out = capsys.readouterr().out
    assert "(2 runs on the tuning seed 9 left out" in out
    assert "gradcomp-local-h32-fp4 " not in out and "| 90.0 |" in out


def test_a_killed_faults_driver_still_cleans_up(tmp_path):
    """`faults.py run` takes its netsim hosts down in a `finally`; SIGTERM (a `kill`, a
    session's end) must reach it, not end Python at once and leave the hosts behind."""
    import subprocess
    marker = tmp_path / "cleaned"
    code = (f"import os, signal, sys, time; sys.path.insert(0, {os.path.dirname(__file__)!r}); import faults\n"
            "faults.exit_on_sigterm()\n"
            "try:\n    os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)\n"
            f"finally:\n    open({str(marker)!r}, 'w').close()\n")
    r = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert r.returncode == 128 + 15
    assert marker.exists()


def test_a_runs_first_workers_ask_for_their_first_quorum_together(tmp_path):
    """faults.py's workers wait for the run's first workers (--start-with) before their first
    quorum, so none forms it alone; a worker missing past the timeout is an error naming it."""
    import threading
    import faults
    done = []
    others = [threading.Thread(target=lambda me=me: done.append(faults.start_together(str(tmp_path), me, 3)))
              for me in ("w2", "w3")]
    for t in others:
        t.start()
    others[0].join(0.3)
    assert done == [], "two of three ready: nobody starts"
    faults.start_together(str(tmp_path), "w1", 3)
    for t in others:
        t.join(5)
    assert len(done) == 2
    faults.start_together(str(tmp_path / "alone"), "w4", 0)  # a revived worker waits for nobody
    with pytest.raises(SystemExit, match="1 of --start-with 2 workers ready after 0 s"):
        faults.start_together(str(tmp_path / "short"), "w1", 2, timeout=0.2)


def test_each_cell_of_one_race_call_races_its_own_models_picks():
    """race-51.sh reads a cell's picks from its model's tuning records; a later cell of
    another model in the same call must read its own, not keep the earlier cell's. Read from
    the committed tuning records, dry (nothing runs)."""
    import subprocess
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

    def dry(*phases, **env):
        r = subprocess.run(["bash", "bench/peer/race-51.sh", "docs/bench/race-51", *phases], cwd=root,
                           env={**os.environ, "RACE_DRY": "1", **env}, capture_output=True, text=True, check=True)
        return [line for line in r.stdout.splitlines() if " cap " in line]

    alone = dry("lstm-1gbit")
    together = dry("gpt-100mbit", "lstm-1gbit")
    assert len(together) == 2 and together[1] == alone[0]
    assert together[0].split(":")[1] != alone[0].split(":")[1], "the two models' picks differ"
    # Picks the caller gives race every cell of the call.
    given = {"RACE_GRADCOMP": "g", "RACE_TORCHFT": "t", "RACE_POSTLOCAL": "p"}
    assert all(line.split(":")[1].startswith("g t p ") for line in dry("gpt-100mbit", "lstm-1gbit", **given))


def test_the_sittings_bound_is_each_seeds_fewest_steps_ddps_included_times_its_free_step(tmp_path, capsys,
                                                                                          monkeypatch):
    m, out, ddp = "ptb-lstm-local", tmp_path / "sitting", tmp_path / "steps"
    out.mkdir()
    ddp.mkdir()
    # The free step: the isolated run's mean after its first evaluation, 0.1 s.
    write_run(out, f"peer-{m}-isolated-none", [row(50, 900.0, 5.0), row(150, 800.0, 15.0)])
    # Seed 1: auto crosses 350 at 450 steps (its evaluation at 500: 60 s); DDP's unshaped
    # run of seed 1 at 400 (the seed's fewest): bound 40 s, auto 1.5×.
    write_run(out, f"peer-{m}-gradcomp-auto-100mbit", [row(400, 400.0, 48.0, sent=4000),
                                                       row(500, 300.0, 60.0, sent=500_000_000)])
    write_run(out, f"peer-{m}-torchft-diloco-h32-p4-d4-100mbit", [row(500, 360.0, 90.0)])  # not met
    write_run(ddp, f"peer-{m}-ddp-none", [row(400, 340.0, 10.0)])
    write_run(ddp, f"peer-{m}-ddp-none-s2", [row(100, 340.0, 10.0)])  # another seed's: not seed 1's bound
    monkeypatch.setattr(sys, "argv", ["sitting.py", str(out), str(ddp)])
    sitting.main()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("free step 0.1000 s") and "s1: 40.0 s" in lines[0], lines
    assert "| gradcomp-auto | 1 | 60.0 | 450 | 1.00 MB | 1.50 |" in lines, lines
    assert "| torchft-diloco-h32-p4-d4 | 1 | not met in 90 | — | — | — |" in lines, lines
