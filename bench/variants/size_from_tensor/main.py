import torch


class CachedAttention(torch.nn.Module):
    # The keys seen so far come from the cache position (a tensor), as in a decoder step.
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)

    def forward(self, x, mask, cache_position: torch.Tensor):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        kv_len = cache_position[-1] + 1
        scores = torch.bmm(q.reshape(b * self.heads, n, -1), k.reshape(b * self.heads, n, -1).transpose(1, 2))
        scores = scores.view(b, self.heads, n, kv_len) + mask[:, None, None, :kv_len]
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d)


def relative_offsets(pos: torch.Tensor, stride: int) -> torch.Tensor:
    # Offsets between pooled and full positions, largest first (Funnel-style).
    hi = pos.max() - pos.min() + stride
    lo = pos.min() - pos.max()
    return torch.arange(hi, lo - 1, -stride)


@torch.compile(backend="eager")
def step(attn, x, mask, cache_position, pos):
    return attn(x, mask, cache_position).sum(), relative_offsets(pos, 2).float().mean()


if __name__ == "__main__":
    torch.manual_seed(0)
    attn = CachedAttention(8)
    with torch.no_grad():
        for n in (5, 5):
            x = torch.randn(2, n, 8)
            mask = torch.zeros(2, 8)
            out, off = step(attn, x, mask, torch.arange(n), torch.arange(6.0))
            print(f"{out.item():.4f} {off.item():.2f}")
