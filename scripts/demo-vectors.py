#!/usr/bin/env python3
"""Test vectors from the DeMo authors' optimizer (bloc97/DeMo demo.py), for
gradcomp (issue #37).

    python3 scripts/demo-vectors.py DEMO_PY [OUT_DIR]     (needs torch, einops)

DEMO_PY is the authors' `demo.py` (the committed vectors were made from
bloc97/DeMo commit 0e48145d702b25f83055e11d9585a9c11bcfe154); OUT_DIR
defaults to crates/compress/tests/vectors. Nothing is fetched and demo.py is
loaded as it is, no shims: W processes (torch.distributed, gloo, CPU) each
run the real `DeMo` optimizer, whose `step()` does its own all_gather.

Each round every worker's gradient (p.grad) is a fixed seeded tensor and
`optimizer.step()` is called once. To record the message and the decoded
aggregate the script wraps, per optimizer instance, `compress.compress` and
`transform.decode` with functions that call the originals and keep a copy of
their results (behaviour unchanged): per parameter and step, compress's
(idx, val) is the worker's message; decode's first result is the worker's
own transmitted estimate (subtracted from its momentum `delta`), the second
is the aggregate (before sign).

Encoding of floats: {"shape": [...], "f32": HEX}, HEX = each element's
IEEE-754 bit pattern as 8 lower-case hex digits (u32), row-major.
"""
import importlib.util
import json
import os
import struct
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORKERS = 3
ROUNDS = 3
COMMIT = "0e48145d702b25f83055e11d9585a9c11bcfe154"

CASES = {
    # The paper's configs (OLMo-*-demo.yaml): decay 0.999, topk 32, chunk 64,
    # weight decay 0, lr 4e-4. Matrix 70x13 -> chunks 35x13 (455 elements,
    # k = 32); vector 60 -> one chunk of 60, k = 32.
    "demo-prod.json": dict(
        opts=dict(lr=4.0e-4, compression_decay=0.999, compression_topk=32, compression_chunk=64, weight_decay=0.0),
        shapes={"mat": (70, 13), "vec": (60,)},
        seed=11,
    ),
    # Small chunks, odd k, nonzero weight decay: matrix 28x30 -> 2x2 chunks of
    # 14x15; vector 130 -> 10 chunks of 13; k = 5 per chunk.
    "demo-small.json": dict(
        opts=dict(lr=1.0e-2, compression_decay=0.9, compression_topk=5, compression_chunk=16, weight_decay=0.1),
        shapes={"mat": (28, 30), "vec": (130,)},
        seed=12,
    ),
}


def f32hex(t):
    t = t.detach().to(torch.float32).contiguous().flatten()
    return "".join("%08x" % struct.unpack("<I", struct.pack("<f", v))[0] for v in t.tolist())


def tensor(t):
    return {"shape": list(t.shape), "f32": f32hex(t)}


def load_demo(path):
    spec = importlib.util.spec_from_file_location("demo_ref", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Params(torch.nn.Module):
    def __init__(self, init):
        super().__init__()
        for name, t in init.items():
            self.register_parameter(name, torch.nn.Parameter(t.clone()))


def worker(rank, demo_path, init_file, out_prefix, case):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORKERS)
    demo = load_demo(demo_path)
    shapes, opts = case["shapes"], case["opts"]
    g = torch.Generator().manual_seed(case["seed"])
    init = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    model = Params(init)
    opt = demo.DeMo(model.parameters(), **opts)

    log = {"compress": [], "decode": []}
    orig_compress, orig_decode = opt.compress.compress, opt.transform.decode

    def compress(x, topk):
        out = orig_compress(x, topk)
        log["compress"].append((out[0].clone(), out[1].clone(), list(out[2]), out[3]))
        return out

    def decode(x):
        out = orig_decode(x)
        log["decode"].append(out.clone())
        return out

    opt.compress.compress, opt.transform.decode = compress, decode

    names = list(shapes)
    rounds = []
    for r in range(ROUNDS):
        # Every worker draws all workers' gradients from the shared generator
        # and keeps its own, so the streams stay identical across ranks.
        grads = [{n: torch.randn(s, generator=g) * (0.5 + 0.25 * w + 0.1 * r) for n, s in shapes.items()} for w in range(WORKERS)]
        for n, p in model.named_parameters():
            p.grad = grads[rank][n].clone()
        log["compress"].clear()
        log["decode"].clear()
        opt.step()
        rec = {"grad": {}, "message": {}, "transmit": {}, "delta_after": {}, "aggregate": {}, "param_grad_after": {}, "params_after": {}}
        for i, (n, p) in enumerate(model.named_parameters()):
            idx, val, xshape, totalk = log["compress"][i]
            transmit, aggregate = log["decode"][2 * i], log["decode"][2 * i + 1]
            rec["grad"][n] = tensor(grads[rank][n])
            rec["message"][n] = {
                "xshape": xshape,
                "totalk": int(totalk),
                "idx_shape": list(idx.shape),
                "idx": idx.flatten().tolist(),
                "val": f32hex(val),
            }
            rec["transmit"][n] = tensor(transmit)
            rec["delta_after"][n] = tensor(opt.demo_state[p]["delta"])
            rec["aggregate"][n] = tensor(aggregate)
            rec["param_grad_after"][n] = f32hex(p.grad)  # sign(aggregate)
            rec["params_after"][n] = tensor(p)
        rounds.append(rec)

    basis = {}
    for size in sorted(set(opt.transform.f_dict)):
        basis[str(size)] = {"f": tensor(opt.transform.f_dict[size]), "b": tensor(opt.transform.b_dict[size])}
    with open("%s.%d.json" % (out_prefix, rank), "w") as f:
        json.dump({"rounds": rounds, "basis": basis, "init": {n: tensor(t) for n, t in init.items()},
                   "shape_dict": {str(k): v for k, v in opt.transform.shape_dict.items()}}, f)
    dist.destroy_process_group()


def main():
    demo_path = os.path.abspath(sys.argv[1])
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "crates/compress/tests/vectors"
    import einops

    made = {"torch": torch.__version__, "einops": einops.__version__, "demo_commit": COMMIT}
    basis_all = {}
    for fname, case in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            init_file = os.path.join(tmp, "pg")
            prefix = os.path.join(tmp, "out")
            mp.spawn(worker, args=(demo_path, init_file, prefix, case), nprocs=WORKERS, join=True)
            per = []
            for rank in range(WORKERS):
                with open("%s.%d.json" % (prefix, rank)) as f:
                    per.append(json.load(f))
        rounds = []
        for r in range(ROUNDS):
            rr = [p["rounds"][r] for p in per]
            for key in ("aggregate", "params_after", "param_grad_after"):
                assert all(x[key] == rr[0][key] for x in rr), f"workers disagree on {key}"
            rounds.append({
                # The transmitted estimate only in round 0 (keeps the file small).
                "workers": [{k: x[k] for k in ("grad", "message", "delta_after") + (("transmit",) if r == 0 else ())} for x in rr],
                "aggregate": rr[0]["aggregate"],
                "sign_aggregate": rr[0]["param_grad_after"],
                "params_after": rr[0]["params_after"],
            })
        for size, b in per[0]["basis"].items():
            basis_all[size] = b
        doc = {
            "made_with": made,
            "options": case["opts"],
            "shapes": {n: list(s) for n, s in case["shapes"].items()},
            "chunk_for_dim": per[0]["shape_dict"],
            "workers": WORKERS,
            "seed": case["seed"],
            "params_init": per[0]["init"],
            "rounds": rounds,
        }
        path = os.path.join(out_dir, fname)
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        print(path, os.path.getsize(path))
    # The DCT-II / inverse basis matrices demo.py builds (float32, via FFT),
    # for every chunk size used above: f[j][b] = DCT(e_j)[b], b = IDCT(...).
    path = os.path.join(out_dir, "demo-dct-basis.json")
    with open(path, "w") as f:
        json.dump({"made_with": made, "basis": basis_all}, f, separators=(",", ":"))
    print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
