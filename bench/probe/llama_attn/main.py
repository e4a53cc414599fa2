import logging
import math
import warnings
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from compat import check_finite, deprecated_kwarg

torch.set_num_threads(1)
torch.manual_seed(7)
logger = logging.getLogger(__name__)
logging.basicConfig(level=logging.WARNING)
warnings.simplefilter("always")


@dataclass
class ModelArgs:
    dim: int = 32
    n_heads: int = 4
    n_kv_heads: Optional[int] = 2
    vocab_size: int = 64
    max_batch_size: int = 2
    max_seq_len: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, cos, sin):
    def rot(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
    return rot(xq), rot(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep, head_dim)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_heads = args.n_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)
        self.register_buffer("cache_k", torch.zeros(args.max_batch_size, args.max_seq_len, self.n_kv_heads, self.head_dim), persistent=False)
        self.register_buffer("cache_v", torch.zeros(args.max_batch_size, args.max_seq_len, self.n_kv_heads, self.head_dim), persistent=False)

    def forward(self, x, start_pos, cos, sin, mask):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, cos, sin)
        self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv
        keys = repeat_kv(self.cache_k[:bsz, : start_pos + seqlen], self.n_rep)
        values = repeat_kv(self.cache_v[:bsz, : start_pos + seqlen], self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        check_finite(scores, "attention probs")
        output = torch.matmul(scores, values)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, args):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(args)
        self.feed_forward = nn.Sequential(nn.Linear(args.dim, 4 * args.dim, bias=False), nn.SiLU(), nn.Linear(4 * args.dim, args.dim, bias=False))
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, cos, sin, mask)
        out = h + self.feed_forward(self.ffn_norm(h))
        logger.debug(f"layer {self.layer_id}: |h|={out.norm():.3f}")
        return out


class Transformer(nn.Module):
    def __init__(self, params):
        super().__init__()
        self.params = params
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = nn.ModuleList([TransformerBlock(i, params) for i in range(2)])
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        freqs = precompute_freqs_cis(params.dim // params.n_heads, params.max_seq_len * 2, params.rope_theta)
        self.register_buffer("cos", freqs.real, persistent=False)
        self.register_buffer("sin", freqs.imag, persistent=False)

    @deprecated_kwarg("pos", "start_pos")
    def forward(self, tokens, start_pos=0, attention_mask=None):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        cos = self.cos[start_pos: start_pos + seqlen][None, :, None, :]
        sin = self.sin[start_pos: start_pos + seqlen][None, :, None, :]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        if attention_mask is not None and not attention_mask.all():
            pad = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(h.dtype).min
            mask = pad if mask is None else mask + pad
        for layer in self.layers:
            h = layer(h, start_pos, cos, sin, mask)
        h = self.norm(h)
        return self.output(h).float()


model = Transformer(ModelArgs()).eval()
cmodel = torch.compile(model, backend="eager")
digest = []
with torch.no_grad():
    prompt = torch.randint(0, 64, (2, 6))
    am = torch.ones(2, 6, dtype=torch.long)
    am[1, :2] = 0
    logits = cmodel(prompt, start_pos=0, attention_mask=am)
    digest.append(round(logits.sum().item(), 3))
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    for pos in range(6, 8):
        logits = cmodel(nxt, pos=pos)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        digest.append(nxt.flatten().tolist())
print("digest", digest)
