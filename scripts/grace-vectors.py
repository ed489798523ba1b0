#!/usr/bin/env python3
"""Test vectors from GRACE's PyTorch compressors and bitsandbytes, for
gradcomp's signSGD, Signum, EF-SignSGD, natural compression and 8-bit
quantization.

GRACE (github.com/sands-lab/grace) runs its compressors inside Horovod; its
`Allgather` communicator compresses each worker's tensor, gathers the
messages, decompresses each and calls the compressor's `aggregate` (divided
by N only for compressors made with average=True). This script runs the same
calls on the CPU with the gathering done by a loop over simulated workers,
so no Horovod is needed. GRACE's natural compressor is written in CuPy; it
runs here with NumPy standing in for CuPy (the same array calls), its random
draws recorded so gradcomp's test can give its rounding the same ones.
8-bit quantization is bitsandbytes' `quantize_blockwise` (the dynamic data
type, `create_dynamic_map`) by its reference (`default`) backend.

    python3 scripts/grace-vectors.py --grace GRACE_CHECKOUT OUT.json

needs torch, numpy and bitsandbytes; GRACE_CHECKOUT is a directory holding
GRACE's `grace_dl` package. The committed vectors
(crates/compress/tests/vectors/grace.json) name the versions they were made
with.
"""
import argparse
import json
import sys
import types

import numpy as np
import torch

D = 67  # elements per tensor: not a multiple of 8, so sign packing pads


def gradient(step, rank, d=D, scale=1.0):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + 7)
    return torch.randn(d, generator=g) * scale


def floats(t):
    return [float(v) for v in t.reshape(-1).tolist()]


def run_steps(make, workers, steps, memory=None):
    """GRACE's Allgather communicator, `steps` times: every worker compensates
    its own gradient (with its own `memory()`, if any), compresses it with its
    own `make()` (Signum's momentum is per worker), updates its memory; the
    messages are decompressed and aggregated, divided by N if the compressor
    averages."""
    compressors = [make() for _ in range(workers)]
    memories = [memory() for _ in range(workers)] if memory else [None] * workers
    record = []
    for step in range(steps):
        grads = [gradient(step, r) for r in range(workers)]
        decompressed = []
        for c, m, g in zip(compressors, memories, grads):
            t = m.compensate(g, "t") if m else g
            compressed, ctx = c.compress(t, "t")
            if m:
                m.update(t, "t", c, compressed, ctx)
            decompressed.append(c.decompress(compressed, ctx))
        out = compressors[0].aggregate(decompressed)
        out = out / workers if compressors[0].average else out
        record.append({"grads": [floats(g) for g in grads], "aggregate": floats(out)})
    return record


class _Array(np.ndarray):
    """A NumPy array with CuPy's `toDlpack`, so GRACE's CuPy code runs as written."""

    def toDlpack(self):
        return self


class _Int32(np.int32):
    """np.int32 as NumPy 1 (which CuPy 7 used) made it: 2^31 wraps to −2^31."""

    def __new__(cls, v):
        return np.int64(v).astype(np.int32)


def natural_vectors(natural_module):
    draws = []
    rng = np.random.default_rng(5)

    def randint(low, high, size, dtype):
        r = rng.integers(low, high, size=size, dtype=dtype)
        draws.append(r)
        return r

    shim = types.SimpleNamespace(
        fromDlpack=lambda t: t.numpy().view(_Array),
        int32=_Int32,
        uint8=np.uint8,
        float32=np.float32,
        where=lambda c, a, b: np.where(c, a, b).view(_Array),
        clip=np.clip,
        right_shift=np.right_shift,
        left_shift=np.left_shift,
        bitwise_or=np.bitwise_or,
        bitwise_and=np.bitwise_and,
        multiply=np.multiply,
        random=types.SimpleNamespace(randint=randint),
    )
    natural_module.cupy = shim
    natural_module.to_dlpack = lambda t: t
    natural_module.from_dlpack = lambda a: torch.from_numpy(np.asarray(a).copy())
    # Magnitudes across the range, both signs, exact powers of two, zeros,
    # and values outside GRACE's range (below 2^-108, from 2^18 up).
    g = torch.Generator().manual_seed(3)
    x = torch.randn(400, generator=g) * torch.pow(10.0, torch.randint(-30, 6, (400,), generator=g).float())
    x[:8] = torch.tensor([0.0, -0.0, 1.0, -0.5, 2.0**18, 2.0**-108, 3e5, 1e-34])
    compressor = natural_module.NaturalCompressor()
    compressed, shape = compressor.compress(x.clone(), "x")
    codes = compressed[0]
    values = compressor.decompress(compressed, shape)
    return {
        "x": floats(x),
        "draws": [int(v) for v in draws[0].tolist()],
        "codes": [int(v) for v in codes.tolist()],
        "values": floats(values),
    }


def eightbit_vectors():
    """bitsandbytes' reference rounding: its `default` backend (bucketize on
    the codebook's midpoints, i.e. the nearest value). Its CPU kernel is a
    faster approximate search (zeros land on code 131, ±2.1e-5, and about one
    element in 700 on the farther of two codes), so it is bypassed."""
    import bitsandbytes.functional as F

    code = F.create_dynamic_map()
    op = torch.ops.bitsandbytes.quantize_blockwise.default
    reference = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    out = []
    # 4096: whole blocks only; 256: 7 whole blocks and a partial one of 208.
    for blocksize, n in ((4096, 2 * 4096), (256, 2000)):
        g = torch.Generator().manual_seed(blocksize)
        x = torch.randn(n, generator=g) * 1e-3
        x[512:768] = 0.0  # a block of zeros at 256 (scale 0)
        codes, absmax = op.redispatch(reference, x, code, blocksize)
        out.append({
            "block": blocksize,
            "x": floats(x),
            "codes": [int(v) for v in codes.tolist()],
            "absmax": floats(absmax),
        })
    return {"codebook": floats(code), "cases": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grace", required=True, help="a directory holding GRACE's grace_dl package")
    ap.add_argument("out")
    args = ap.parse_args()
    sys.path.insert(0, args.grace)
    from grace_dl.torch.compressor.efsignsgd import EFSignSGDCompressor
    from grace_dl.torch.compressor.signsgd import SignSGDCompressor
    from grace_dl.torch.compressor.signum import SignumCompressor
    from grace_dl.torch.memory.efsignsgd import EFSignSGDMemory

    sys.modules["cupy"] = types.ModuleType("cupy")  # replaced below by the NumPy shim
    from grace_dl.torch.compressor import natural as natural_module
    import bitsandbytes

    doc = {
        "made_with": {"torch": torch.__version__, "numpy": np.__version__, "bitsandbytes": bitsandbytes.__version__},
        # Two workers tie on some elements (a tie is a +1); three never tie.
        "signsgd": {str(n): run_steps(SignSGDCompressor, n, 2) for n in (2, 3)},
        "signum": {"momentum": 0.9, "workers": 3, "steps": run_steps(lambda: SignumCompressor(0.9), 3, 4)},
        # lr = 1: GRACE's memory scales this step's gradient by lr, except on
        # the first step, so only at lr = 1 is it error feedback with a raw
        # residual throughout; its aggregate is the workers' sum (average=False).
        "efsignsgd": {
            "lr": 1.0,
            "workers": 2,
            "steps": run_steps(lambda: EFSignSGDCompressor(1.0), 2, 4, memory=lambda: EFSignSGDMemory(1.0)),
        },
        "natural": natural_vectors(natural_module),
        "eightbit": eightbit_vectors(),
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
