import math
import warnings
import torch
import torch.nn as nn
import torch.nn.functional as F
from attn_utils import attention_entropy, sparsity_report


class TopKSparseAttention(nn.Module):
    """Explicit sparse transformer style: keep top-k scores per query (Zhao et al. 2019)."""

    def __init__(self, dim=64, n_heads=4, topk=8, causal=True):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)
        self.topk = topk
        self.causal = causal
        self.last_stats = None

    def forward(self, x, key_padding_mask=None, return_stats=False):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal:
            causal = torch.ones(T, T, dtype=torch.bool).triu(1)
            scores = scores.masked_fill(causal, float("-inf"))
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        k_eff = min(self.topk, T)
        if k_eff < T:
            vals, _ = scores.topk(k_eff, dim=-1)
            thresh = vals[..., -1:]
            scores = scores.masked_fill(scores < thresh, float("-inf"))
        fully_masked = torch.isinf(scores).all(dim=-1)
        if fully_masked.any():
            warnings.warn(f"{int(fully_masked.sum())} query rows are fully masked; zeroing them")
            scores = scores.masked_fill(fully_masked[..., None], 0.0)
        probs = F.softmax(scores, dim=-1)
        if return_stats:
            self.last_stats = dict(sparsity_report(probs, k_eff), entropy=attention_entropy(probs))
        out = (probs @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim=64, **kw):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = TopKSparseAttention(dim, **kw)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, key_padding_mask=None, return_stats=False):
        x = x + self.attn(self.ln1(x), key_padding_mask, return_stats)
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self, depth=2, dim=64, **kw):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, **kw) for _ in range(depth)])

    def forward(self, x, key_padding_mask=None, return_stats=False):
        if not all(m.any() for m in ~key_padding_mask) if key_padding_mask is not None else False:
            raise ValueError("a sequence is entirely padding")
        for blk in self.blocks:
            x = blk(x, key_padding_mask, return_stats)
        if any(torch.isnan(p).any() for p in (x,)):
            print("nan detected in output")
        return x


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Model(causal=False).eval()
    cmodel = torch.compile(model, backend="eager")
    digest = []
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(2, 16, 64)
            pad = torch.zeros(2, 16, dtype=torch.bool)
            pad[1, 10 + step:] = True
            out = cmodel(x, pad, return_stats=(step == 2))
            digest.append(round((out * torch.linspace(-1, 1, 64)).sum().item(), 4))
    digest.append(model.blocks[0].attn.last_stats)
    print("digest", digest)


if __name__ == "__main__":
    main()
