"""A small transformer encoder over padded batches, with data-dependent masking.

Two patterns from real attention code, each a graph break on every call:
- `if pad.any():` applies the key-padding mask only when the batch has padding (GB0170):
  the test is read on the host, and the block is split around the branch;
- a boolean-mask selection feeding a reduction, `scores[scores > -1e9].mean()`,
  the mean attention logit over the unmasked entries kept as a temperature statistic
  (GB0036): its size depends on the data.

    python masked_block.py           # a few inference steps, prints a checksum per step
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Small-batch inference sizes (short utterances, a streaming classifier): per-call work is
# well under a millisecond, so what happens between the kernels shows in the latency.
BATCH = 8
SEQ = 16
DIM = 64
HEADS = 4
LAYERS = 2
VOCAB = 512


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (C // self.heads) ** -0.5
        if pad.any():
            scores = scores.masked_fill(pad[:, None, None, :], -1e9)
        # Centre the logits by their mean over the attended entries (softmax is
        # shift-invariant per row, but this keeps the logits small for the half-precision path).
        scores = scores - scores[scores > -1e9].mean()
        attn = scores.softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Encoder(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.cls = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, pad)
        return self.cls(self.norm(x)[:, 0])


def build(device: str = "cpu", mode: str = "default"):
    """The compiled model and one padded batch: `step(*inputs)` is one inference call."""
    torch.manual_seed(0)
    model = Encoder(VOCAB, DIM, HEADS, LAYERS).to(device).eval()
    step = torch.compile(model, mode=None if mode == "default" else mode)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
    lengths = torch.randint(SEQ // 2, SEQ + 1, (BATCH,), device=device)
    pad = torch.arange(SEQ, device=device)[None, :] >= lengths[:, None]
    return step, (ids, pad)


def main() -> None:
    step, (ids, pad) = build()
    with torch.no_grad():
        for i in range(3):
            out = step((ids + i) % VOCAB, pad)
            print(f"step {i} out {out.sum().item():.4f} max {out.abs().max().item():.4f}")


if __name__ == "__main__":
    main()
