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
    psumsq   sum of squared parameter values (`param_norm`), when asked (else NaN)

as a tensor [n_layers, 6] on the gradients' device, and `update_sumsq` the per-layer sum of
squared changes of the parameters since a `snapshot()` (`update_norm`: what the optimizer step
did to the layer). Nothing is copied to the host here: the recorder stacks these rows and copies
them once per flush.

Cost: on a CPU the fused `_foreach` kernels still run one tensor at a time, so the price is per
parameter tensor and per pass: the passes are kept few (L2 norm, max of |g|, L0 norm, sign, two L2
norms of the signs; parameter norm and update norm only when asked), and the index tensors are built
once.
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
                name, changed = name[len(p) :], True
        name = name.replace("._orig_mod.", ".").replace("._fsdp_wrapped_module.", ".")
    return name


def layer_of(param_name: str) -> str:
    """The layer (module) a parameter belongs to: its name without the last component."""
    name = clean_name(param_name)
    return name.rsplit(".", 1)[0] if "." in name else name


SIGN_CHUNK = 1 << 26  # elements per batch of the sign pass (bounds its temporary memory)


def _sign_counts(grads: list[torch.Tensor], numel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(non-zero count, positive count) per tensor, with a few fused `_foreach` calls. The L0 norm
    counts the non-zeros (a NaN element is not zero); `sign` maps NaN to 0, so over the signs the
    squared L2 norm is positives + negatives and that of sign + 1 is (numel - positives -
    negatives) + 4 x positives: the positives without the NaN elements. The temporary sign tensors
    are made for batches of at most SIGN_CHUNK elements. `numel`: the element counts of `grads`
    (float32, on their device)."""
    nz_all, s1_all, s2_all = [], [], []
    i = 0
    while i < len(grads):
        j, n = i, 0
        while j < len(grads) and (j == i or n + grads[j].numel() <= SIGN_CHUNK):
            n += grads[j].numel()
            j += 1
        nz_all.extend(torch._foreach_norm(grads[i:j], 0))
        signs = torch._foreach_sign(grads[i:j])
        s1_all.extend(torch._foreach_norm(signs))
        torch._foreach_add_(signs, 1.0)
        s2_all.extend(torch._foreach_norm(signs))
        i = j
    nz = torch.stack(nz_all).float()
    s1 = torch.stack(s1_all).double().square().round().float()
    s2 = torch.stack(s2_all).double().square().round().float()
    return nz, (s2 - (numel - s1)) / 4


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
        self._numel = torch.tensor([p.numel() for p in self.params], dtype=torch.float32)
        self._dev: dict[tuple, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.names)

    def _on(self, what: str, device: torch.device, rows: tuple | None = None) -> torch.Tensor:
        """A cached index / count tensor on `device` (`rows`: the parameters that have a gradient)."""
        key = (what, device, rows)
        t = self._dev.get(key)
        if t is None:
            base = self._index if what == "index" else self._numel
            t = base if rows is None else base[list(rows)]
            t = self._dev[key] = t.to(device)
        return t

    @staticmethod
    def _f32(ts: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t if t.dtype == torch.float32 else t.float() for t in ts]

    @torch.no_grad()
    def snapshot(self) -> list[torch.Tensor]:
        """A copy of the parameters now (before the optimizer step), for `update_sumsq`."""
        return [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update_sumsq(self, snapshot: list[torch.Tensor]) -> torch.Tensor:
        """[n_layers] float32: per layer, the sum of squared changes of its parameters since
        `snapshot` (the optimizer step's update; 0 for a skipped step)."""
        diffs = self._f32(torch._foreach_sub([p.detach() for p in self.params], snapshot))
        device = diffs[0].device
        sq = torch.stack(torch._foreach_norm(diffs)).float().pow(2)
        return torch.zeros(len(self.names), dtype=torch.float32, device=device).index_add_(
            0, self._on("index", device), sq
        )

    @torch.no_grad()
    def compute(self, param_norm: bool | None = None) -> torch.Tensor | None:
        """[n_layers, 6] float32 on the gradients' device (see the module docstring); None
        when no parameter has a gradient. A parameter without a gradient counts as all zeros.
        `param_norm` (default: as constructed) also measures the parameter norms."""
        grads, present = [], []
        for i, p in enumerate(self.params):
            if p.grad is not None:
                grads.append(p.grad)
                present.append(i)
        if not grads:
            return None
        device = grads[0].device
        rows = None if len(present) == len(self.params) else tuple(present)
        numel = self._on("numel", device, rows)
        g32 = self._f32(grads)
        sq = torch.stack(torch._foreach_norm(g32)).float().pow(2)
        amax = torch.stack(torch._foreach_max(torch._foreach_abs(g32))).float()  # NaN propagates
        nz, pos = _sign_counts(g32, numel)
        cols = [sq, numel - nz, pos, amax, numel]
        if self.param_norm if param_norm is None else param_norm:
            ps = self._f32([self.params[i].detach() for i in present] if rows else [p.detach() for p in self.params])
            cols.append(torch.stack(torch._foreach_norm(ps)).float().pow(2))
        else:
            cols.append(torch.full_like(numel, float("nan")))
        per_param = torch.stack(cols, dim=1)
        idx = self._on("index", device, rows)
        if rows is not None:
            # a parameter without a gradient: all its elements count as zeros
            missing = [i for i in range(len(self.params)) if i not in set(present)]
            n = torch.tensor([self.params[i].numel() for i in missing], dtype=torch.float32, device=device)
            extra = torch.zeros((len(missing), len(COLUMNS)), dtype=torch.float32, device=device)
            extra[:, 1] = n
            extra[:, 4] = n
            per_param = torch.cat([per_param, extra])
            idx = torch.cat([idx, self._index[missing].to(device)])
        sums = torch.zeros((len(self.names), len(COLUMNS)), dtype=torch.float32, device=device).index_add_(
            0, idx, per_param
        )
        amax_l = torch.zeros(len(self.names), dtype=torch.float32, device=device).scatter_reduce(
            0, idx, per_param[:, 3], reduce="amax", include_self=False
        )
        # scatter_reduce amax drops NaN on some builds: the sums column is NaN when any element was
        sums[:, 3] = torch.where(sums[:, 3].isnan(), sums[:, 3], amax_l)
        return sums

    @torch.no_grad()
    def total_norm(self) -> torch.Tensor | None:
        """The global L2 norm of all gradients (a 0-d float32 tensor on the device)."""
        grads = [p.grad for p in self.all_params if p.grad is not None]
        if not grads:
            return None
        g32 = [g if g.dtype == torch.float32 else g.float() for g in grads]
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(g32)).float())
