"""Per-layer gradient statistics computed on the device, without a host synchronisation.

A *layer* is a module that owns parameters: the parameter name minus its last component
(`transformer.h.0.attn.c_attn.weight` and `.bias` -> `transformer.h.0.attn.c_attn`), with the
wrappers' prefixes removed (`module.` of DDP, `_orig_mod.` of `torch.compile`, `_forward_module.`
of Lightning/Fabric), so the names match the model's own. Weight and bias are pooled.

For each layer, `LayerStats.compute` returns one float32 row of

    sumsq    sum of squared gradient elements (the L2 norm is its square root)
    zeros    number of elements exactly 0
    pos      number of elements > 0
    max_abs  largest |element| (NaN when any element is NaN)
    numel    number of elements
    psumsq   sum of squared parameter values (`param_norm`), when asked

as a tensor [n_layers, 6] on the gradients' device. Nothing is copied to the host here: the
recorder stacks these rows and copies them once per flush.
"""

from __future__ import annotations

import torch

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_forward_module.", "_fsdp_wrapped_module.")
COLUMNS = ("sumsq", "zeros", "pos", "max_abs", "numel", "psumsq")


def clean_name(name: str) -> str:
    """A parameter name without the prefixes that DDP / compile / Lightning wrappers add."""
    changed = True
    while changed:
        changed = False
        for p in WRAPPER_PREFIXES:
            if name.startswith(p):
                name, changed = name[len(p):], True
        name = name.replace("._orig_mod.", ".").replace("._fsdp_wrapped_module.", ".")
    return name


def layer_of(param_name: str) -> str:
    """The layer (module) a parameter belongs to: its name without the last component."""
    name = clean_name(param_name)
    return name.rsplit(".", 1)[0] if "." in name else name


SIGN_CHUNK = 1 << 26  # elements per batch of the sign pass (bounds its temporary memory)


def _sign_counts(grads: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(non-zero count, positive count) per tensor, with a few fused `_foreach` calls: the L1 norm
    of sign(g) counts the non-zeros, the L1 norm of sign(g) + 1 is zeros + 2 x positives. The
    temporary sign tensors are made for batches of at most SIGN_CHUNK elements."""
    nz_all, pos_all = [], []
    i = 0
    while i < len(grads):
        j, n = i, 0
        while j < len(grads) and (j == i or n + grads[j].numel() <= SIGN_CHUNK):
            n += grads[j].numel()
            j += 1
        signs = torch._foreach_sign(grads[i:j])
        nz = torch.stack(torch._foreach_norm(signs, 1))
        torch._foreach_add_(signs, 1.0)
        s2 = torch.stack(torch._foreach_norm(signs, 1))
        numel = torch.tensor([g.numel() for g in grads[i:j]], dtype=torch.float32, device=nz.device)
        nz_all.append(nz.float())
        pos_all.append((s2.float() - (numel - nz.float())) / 2)
        i = j
    return torch.cat(nz_all), torch.cat(pos_all)


class LayerStats:
    """The layers of a model and their parameters, with the on-device statistics kernel.

    `include(name)` (optional) keeps a layer when it returns True; parameters that do not
    require gradients are left out. The layer order is the model's parameter order.
    """

    def __init__(self, model: torch.nn.Module, include=None, param_norm: bool = True):
        groups: dict[str, list[torch.nn.Parameter]] = {}
        self.all_params = [p for p in model.parameters() if p.requires_grad]
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            layer = layer_of(name)
            if include is not None and not include(layer):
                continue
            groups.setdefault(layer, []).append(p)
        self.names = list(groups)
        self.params = [p for ps in groups.values() for p in ps]
        index = [i for i, ps in enumerate(groups.values()) for _ in ps]
        self.param_norm = param_norm
        self._index = torch.tensor(index, dtype=torch.long)
        self._index_dev: dict[torch.device, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.names)

    def _idx(self, device: torch.device) -> torch.Tensor:
        if device not in self._index_dev:
            self._index_dev[device] = self._index.to(device)
        return self._index_dev[device]

    @torch.no_grad()
    def compute(self) -> torch.Tensor | None:
        """[n_layers, 6] float32 on the gradients' device (see the module docstring); None
        when no parameter has a gradient. A parameter without a gradient counts as all zeros."""
        grads, present = [], []
        for p in self.params:
            if p.grad is not None:
                grads.append(p.grad)
                present.append(True)
            else:
                present.append(False)
        if not grads:
            return None
        device = grads[0].device
        per_param = torch.zeros((len(self.params), len(COLUMNS)), dtype=torch.float32, device=device)
        rows = torch.tensor([i for i, ok in enumerate(present) if ok], dtype=torch.long, device=device)
        g32 = [g if g.dtype == torch.float32 else g.float() for g in grads]
        norms = torch._foreach_norm(g32)
        amax = torch._foreach_norm(g32, float("inf"))
        nz, pos = _sign_counts(g32)
        numel = torch.tensor([g.numel() for g in grads], dtype=torch.float32, device=device)
        cols = [
            torch.stack(norms).float().pow(2),
            numel - nz,
            pos,
            torch.stack(amax).float(),
            numel,
        ]
        cols[3] = torch.where(cols[0].isnan(), torch.full_like(cols[3], float("nan")), cols[3])
        if self.param_norm:
            ps = [p.detach() for p, ok in zip(self.params, present) if ok]
            ps = [p if p.dtype == torch.float32 else p.float() for p in ps]
            cols.append(torch.stack(torch._foreach_norm(ps)).float().pow(2))
        else:
            cols.append(torch.full_like(numel, float("nan")))
        per_param[rows] = torch.stack(cols, dim=1)
        # a parameter without a gradient: all its elements count as zeros
        missing = [i for i, ok in enumerate(present) if not ok]
        if missing:
            n = torch.tensor([self.params[i].numel() for i in missing], dtype=torch.float32, device=device)
            mi = torch.tensor(missing, dtype=torch.long, device=device)
            per_param[mi, 1] = n
            per_param[mi, 4] = n
        idx = self._idx(device)
        out = torch.zeros((len(self.names), len(COLUMNS)), dtype=torch.float32, device=device)
        sums = out.index_add(0, idx, per_param)
        amax_l = torch.zeros(len(self.names), dtype=torch.float32, device=device).scatter_reduce(
            0, idx, per_param[:, 3], reduce="amax", include_self=False)
        # scatter_reduce amax drops NaN on some builds: a layer with a NaN element keeps NaN
        nan_l = torch.zeros(len(self.names), dtype=torch.float32, device=device).index_add(
            0, idx, per_param[:, 3].isnan().float()) > 0
        sums[:, 3] = torch.where(nan_l, torch.full_like(amax_l, float("nan")), amax_l)
        return sums

    @torch.no_grad()
    def total_norm(self) -> torch.Tensor | None:
        """The global L2 norm of all gradients (a 0-d float32 tensor on the device)."""
        grads = [p.grad for p in self.all_params if p.grad is not None]
        if not grads:
            return None
        g32 = [g if g.dtype == torch.float32 else g.float() for g in grads]
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(g32)).float())
