"""Transformer building blocks: RMSNorm, causal self-attention, MLP, block, LM head."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .utils import check_finite


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = x.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()
        return x * rms * self.weight


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, max_seq_len: int):
        super().__init__()
        assert dim % n_heads == 0
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        causal = torch.tril(torch.ones(max_seq_len, max_seq_len, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

        # Causal, and padded keys must not receive attention.
        mask = self.causal[:T, :T] & (attention_mask[:, None, None, :] != 0)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.transpose(1, 2).reshape(B, T, C)
        return self.proj(out)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, idx: int, dim: int, n_heads: int, mlp_ratio: int, max_seq_len: int):
        super().__init__()
        self.idx = idx
        self.norm1 = RMSNorm(dim)
        self.attn = CausalSelfAttention(dim, n_heads, max_seq_len)
        self.norm2 = RMSNorm(dim)
        self.mlp = MLP(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        print(f"block {self.idx}: x.shape={tuple(x.shape)}")
        x = x + self.attn(self.norm1(x), attention_mask)
        x = x + self.mlp(self.norm2(x))
        return x


class LMHead(nn.Module):
    """Final norm and vocabulary projection, with temperature and logit capping."""

    def __init__(self, dim: int, vocab_size: int, logit_cap: float, temperature: float = 1.0):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.proj = nn.Linear(dim, vocab_size, bias=False)
        self.logit_cap = logit_cap
        # The temperature lives in a buffer so it is saved with the checkpoint
        # and can be annealed from outside without rebuilding the module.
        self.register_buffer("temperature", torch.tensor(temperature))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.temperature.item()
        x = check_finite(self.norm(x), "final hidden state")
        logits = self.proj(x)
        logits = logits / scale
        # Hard-cap the logits: a few huge values early in training saturate
        # the softmax and stall learning.
        if logits.abs().max() > self.logit_cap:
            logits = logits.clamp(-self.logit_cap, self.logit_cap)
        return logits
