#!/usr/bin/env python3
"""Test vectors from Templar's own SparseLoCo code, for gradcomp (issue #37).

Runs the authors' code, unmodified, on fixed seeded inputs:
  * `src/tplr/compress.py`  ChunkingTransformer, TopKCompressor (12-bit index
    packing, 2-bit quantisation with a per-tensor lookup table);
  * `src/tplr/neurons.py`   prepare_gradient_dict (error feedback with decay,
    encode, compress, decompress, decode, subtract) and outer_step
    (dequantise, per-peer median-norm clipping, batch_decompress with a
    scatter *mean*, decode, outer SGD step);
  * `hparams/hparams.json`  the production options (target_chunk, topk,
    quantization_bins/range, momentum_decay, outer_learning_rate, use_dct).

    python3 scripts/sparseloco-vectors.py TEMPLAR_DIR [OUT_DIR]

TEMPLAR_DIR is a checkout (or `git archive`) of tplr-ai/templar holding the
three files above; the committed vectors were made from commit
c2397ac524c9d9de550a2a126ed37505d090d69f (v2.1.3). OUT_DIR defaults to
crates/compress/tests/vectors. Nothing is fetched. Only the imports of
Templar's framework that the compressor does not use are stubbed (the `tplr`
package root, which would pull in bittensor/boto3/..., `tplr.distributed`
and `wandb`); both modules are loaded from their files as they are.

Simulation: W workers ("miners") own every parameter; each round, worker w's
pseudo-gradient (p.grad, what Templar computes as θ_start − θ_end after the
inner steps) is a fixed seeded tensor. prepare_gradient_dict is called on a
stand-in miner object per worker, the W messages are put in the order
w = 0..W-1 into the structure comms.gather returns, and outer_step applies
them to one model (every worker applies the same update). Float32, CPU.

Encoding of floats: a tensor is {"shape": [...], "f32": HEX} where HEX is the
concatenation of each element's IEEE-754 bit pattern as 8 lower-case hex
digits (u32, most significant digit first), in row-major order. Bytes (packed
indices, 2-bit codes stored one per uint8) are hex strings, 2 digits a byte.
"""
import importlib.util
import json
import logging
import os
import struct
import sys
import types
from types import SimpleNamespace

import torch

WORKERS = 3
ROUNDS = 3


def f32hex(t):
    t = t.detach().to(torch.float32).contiguous().flatten()
    return "".join("%08x" % struct.unpack("<I", struct.pack("<f", v))[0] for v in t.tolist())


def tensor(t):
    return {"shape": list(t.shape), "f32": f32hex(t)}


def scalar_hex(v):
    return "%08x" % struct.unpack("<I", struct.pack("<f", float(v)))[0]


def load_templar(root):
    """Load compress.py and neurons.py from `root` with stub framework imports."""
    tplr = types.ModuleType("tplr")
    tplr.__path__ = []  # a package, so `import tplr.x` looks in sys.modules
    tplr.logger = logging.getLogger("tplr-stub")
    sys.modules["tplr"] = tplr

    dist_mod = types.ModuleType("tplr.distributed")
    dist_mod.dist_helper = SimpleNamespace()  # only used by functions not run here
    sys.modules["tplr.distributed"] = dist_mod
    tplr.distributed = dist_mod

    wandb = types.ModuleType("wandb")
    sdk = types.ModuleType("wandb.sdk")
    run = types.ModuleType("wandb.sdk.wandb_run")
    run.Run = type("Run", (), {})
    wandb.sdk, sdk.wandb_run = sdk, run
    sys.modules.update({"wandb": wandb, "wandb.sdk": sdk, "wandb.sdk.wandb_run": run})

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    tplr.compress = load("tplr.compress", os.path.join(root, "src/tplr/compress.py"))
    tplr.neurons = load("tplr.neurons", os.path.join(root, "src/tplr/neurons.py"))
    with open(os.path.join(root, "hparams/hparams.json")) as f:
        hparams = json.load(f)
    return tplr, hparams


class Params(torch.nn.Module):
    def __init__(self, shapes, init):
        super().__init__()
        for name, shape in shapes.items():
            self.register_parameter(name, torch.nn.Parameter(init[name].clone()))


def run_case(tplr, opts, shapes, seed):
    compress, neurons = tplr.compress, tplr.neurons
    g = torch.Generator().manual_seed(seed)
    init = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    model = Params(shapes, init)  # the shared (outer) model
    hp = SimpleNamespace(**opts)

    transformer = compress.ChunkingTransformer(model, target_chunk=hp.target_chunk)
    compressor = compress.TopKCompressor(
        use_quantization=True,
        quantization_bins=hp.quantization_bins,
        quantization_range=hp.quantization_range,
    )
    miners = []
    for _ in range(WORKERS):
        m = SimpleNamespace(
            hparams=hp,
            model=Params(shapes, init),
            owned_params=set(shapes),
            error_feedback={n: None for n in shapes},
            error_feedback_cpu_buffers={n: torch.empty(s) for n, s in shapes.items()},
            transformer=transformer,
            compressor=compressor,
        )
        miners.append(m)
    outer = torch.optim.SGD(model.parameters(), lr=hp.outer_learning_rate)

    chunking = {}
    for n, s in shapes.items():
        enc = transformer.encode(torch.zeros(s), use_dct=hp.use_dct)
        flat = enc.reshape(*enc.shape[:-2], -1) if enc.dim() > 2 else enc
        chunking[n] = {
            "encoded_shape": list(enc.shape),
            "chunk_elems": flat.shape[-1],
            "k_effective": compressor._clamp_topk(flat, hp.topk_compression),
        }

    rounds = []
    for r in range(ROUNDS):
        # Pseudo-gradients: different scale per worker and round.
        grads = [
            {n: torch.randn(s, generator=g) * (0.5 + 0.25 * w + 0.1 * r) for n, s in shapes.items()}
            for w in range(WORKERS)
        ]
        workers, payloads = [], []
        for w, m in enumerate(miners):
            for n, p in m.model.named_parameters():
                p.grad = grads[w][n].clone()
            grad_dict, xshapes, totalks = neurons.prepare_gradient_dict(m, step_window=r)
            payloads.append(grad_dict)
            msg = {}
            for n in shapes:
                idx_packed = grad_dict[n + "idxs"]
                codes = grad_dict[n + "vals"]
                shift, scale, offset, lookup, dtype = grad_dict[n + "quant_params"]
                idx = compress.unpack_12bit_indices(idx_packed, codes.shape)
                msg[n] = {
                    "xshape": list(xshapes[n]),
                    "totalk": int(totalks[n]),
                    "indices_shape": list(idx.shape),
                    "indices": idx.flatten().tolist(),
                    "indices_packed12": bytes(idx_packed.tolist()).hex(),
                    "codes": bytes(codes.flatten().tolist()).hex(),
                    "shift": scalar_hex(shift),
                    "scale": scalar_hex(scale),
                    "scale_f64": repr(float(scale)),
                    "offset": int(offset),
                    "lookup": f32hex(lookup),
                    "dtype": str(dtype),
                    "dequantized": f32hex(compressor._dequantize_values(codes, grad_dict[n + "quant_params"])),
                }
            workers.append(
                {
                    "grad": {n: tensor(grads[w][n]) for n in shapes},
                    "message": msg,
                    "error_feedback_after": {n: tensor(m.error_feedback[n]) for n in shapes},
                }
            )

        # What comms.gather hands to outer_step: per-parameter lists, peer order.
        state = {}
        for n in shapes:
            for key in ("idxs", "vals", "quant_params"):
                state[n + key] = [pl[n + key] for pl in payloads]
        gather = SimpleNamespace(state_dict=SimpleNamespace(**state))

        # The aggregate exactly as outer_step builds it (lines 313-355 of
        # neurons.py at the recorded commit), recorded for the test ...
        aggregate, norms = {}, {}
        for n, p in model.named_parameters():
            vals_f32 = compressor.maybe_dequantize_values(state[n + "vals"], state[n + "quant_params"], "cpu")
            block_norms = torch.stack([torch.norm(v, p=2) for v in vals_f32])
            dec = compressor.batch_decompress(
                torch.empty_like(p),
                state[n + "idxs"],
                vals_f32,
                xshapes[n],
                totalks[n],
                quantize_params=None,
                block_norms=block_norms,
                normalise=False,
                clip_norm=True,
            )
            aggregate[n] = transformer.decode(dec, use_dct=hp.use_dct).to(p.dtype)
            norms[n] = {"block_norms": f32hex(block_norms), "median": scalar_hex(torch.median(block_norms))}
        # ... and applied by the authors' outer_step itself.
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        neurons.outer_step(
            model,
            outer,
            gather_result=gather,
            transformer=transformer,
            compressor=compressor,
            xshapes=xshapes,
            totalks=totalks,
            device="cpu",
            is_master=True,
            world_size=1,
            use_dct=hp.use_dct,
        )
        for n, p in model.named_parameters():
            expect = before[n] - hp.outer_learning_rate * aggregate[n]
            assert torch.equal(p.detach(), expect), f"outer_step applied something else to {n}"
        rounds.append(
            {
                "workers": workers,
                "aggregate": {n: tensor(aggregate[n]) for n in shapes},
                "clipping": norms,
                "params_after": {n: tensor(p) for n, p in model.named_parameters()},
            }
        )
    return {
        "options": opts,
        "shapes": {n: list(s) for n, s in shapes.items()},
        "chunking": chunking,
        "workers": WORKERS,
        "seed": seed,
        "params_init": {n: tensor(init[n]) for n in shapes},
        "rounds": rounds,
    }


def main():
    root = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "crates/compress/tests/vectors"
    tplr, hp = load_templar(root)
    torch.manual_seed(0)
    keys = ("target_chunk", "topk_compression", "quantization_bins", "quantization_range",
            "momentum_decay", "outer_learning_rate", "use_dct")
    prod = {k: hp[k] for k in keys}
    made = {"torch": torch.__version__, "templar_commit": os.environ.get("TEMPLAR_COMMIT", "c2397ac524c9d9de550a2a126ed37505d090d69f")}
    cases = {
        # hparams.json as it is: chunks 35x13 of the matrix (455 elements,
        # k = 64); the vector's chunks are 50 long, so k clamps to 50 (every
        # element sent, still 2-bit quantised).
        "sparseloco-prod.json": (prod, {"mat": (70, 13), "vec": (100,)}, 1),
        # Same code, smaller chunks and an odd requested k (clamped to 6):
        # matrix chunks 14x15 (2x2 of them), vector chunks of 13 (10 of them).
        "sparseloco-smallk.json": (dict(prod, target_chunk=16, topk_compression=7), {"mat": (28, 30), "vec": (130,)}, 2),
    }
    for fname, (opts, shapes, seed) in cases.items():
        doc = {"made_with": made}
        doc.update(run_case(tplr, opts, shapes, seed))
        path = os.path.join(out_dir, fname)
        with open(path, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
        print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
