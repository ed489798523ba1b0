"""Tensors as one flat float32 vector on the host, and back: how the core
sees a model's parameters, its buffers, an optimizer's state and the
gradients (`_local`, `_membership`)."""
from typing import List, Sequence

import torch


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """`tensors`' values, in order, as one float32 vector on the host (a copy)."""
    if not tensors:
        return torch.zeros(0)
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])


def views(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """`flat` cut into views shaped as `like`'s tensors, in order (`flatten`'s inverse)."""
    out, offset = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[offset:offset + n].view_as(t))
        offset += n
    return out


def write_back(tensors: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """`flat`'s values into `tensors`, in place (their devices and dtypes kept)."""
    with torch.no_grad():
        for t, v in zip(tensors, views(flat, tensors)):
            t.copy_(v)
