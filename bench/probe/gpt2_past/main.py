import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from generation_utils import top_k_top_p_filtering, check_past_length


class GPT2Config:
    vocab_size = 256
    n_positions = 64
    n_embd = 64
    n_layer = 2
    n_head = 4
    eos_token_id = 0


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        n = config.n_positions
        self.register_buffer("bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n), persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)
        self.embed_dim = config.n_embd
        self.num_heads = config.n_head
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5, dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        attn_weights = torch.where(causal_mask, attn_weights, torch.full([], mask_value, dtype=attn_weights.dtype))
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value), attn_weights

    def _split_heads(self, t):
        new_shape = t.size()[:-1] + (self.num_heads, self.head_dim)
        return t.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, t):
        t = t.permute(0, 2, 1, 3).contiguous()
        return t.view(t.size()[:-2] + (self.num_heads * self.head_dim,))

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(self.embed_dim, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache is True else None
        attn_output, _ = self._attn(query, key, value, attention_mask)
        return self.c_proj(self._merge_heads(attn_output)), present


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.c_fc = Conv1D(4 * config.n_embd, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, 4 * config.n_embd)

    def forward(self, x, layer_past=None, attention_mask=None, use_cache=False):
        a, present = self.attn(self.ln_1(x), layer_past=layer_past, attention_mask=attention_mask, use_cache=use_cache)
        x = x + a
        x = x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x, present


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        if (input_ids >= self.config.vocab_size).any():
            raise ValueError("input_ids contain ids >= vocab_size")
        past_length = check_past_length(past_key_values, self.config.n_positions)
        if past_key_values is None:
            past_key_values = tuple([None] * len(self.h))
        position_ids = torch.arange(past_length, input_ids.size(-1) + past_length, dtype=torch.long).unsqueeze(0)
        hidden = self.wte(input_ids) + self.wpe(position_ids)
        presents = () if use_cache else None
        for block, layer_past in zip(self.h, past_key_values):
            hidden, present = block(hidden, layer_past=layer_past, use_cache=use_cache)
            if use_cache is True:
                presents = presents + (present,)
        return self.lm_head(self.ln_f(hidden)), presents


def apply_repetition_penalty(logits, cur, repetition_penalty):
    for b in range(cur.size(0)):
        for prev in set(cur[b].tolist()):
            if logits[b, prev] < 0:
                logits[b, prev] *= repetition_penalty
            else:
                logits[b, prev] /= repetition_penalty
    return logits


def sample_step(logits, cur, finished, temperature=1.0, top_k=20, eos_token_id=0, repetition_penalty=1.3):
    logits = logits[:, -1, :] / temperature
    if repetition_penalty != 1.0:
        logits = apply_repetition_penalty(logits, cur, repetition_penalty)
    logits = top_k_top_p_filtering(logits, top_k=top_k, top_p=0.9)
    next_token = torch.argmax(logits, dim=-1)
    next_token = torch.where(finished, torch.full_like(next_token, eos_token_id), next_token)
    cur = torch.cat([cur, next_token[:, None]], dim=-1)
    finished = finished | (next_token == eos_token_id)
    if finished.all():
        print(f"all sequences finished, lengths {(cur != eos_token_id).sum(-1)}")
    return cur, finished


@torch.no_grad()
def generate(model, step_fn, input_ids, max_new_tokens, eos_token_id=0):
    past = None
    cur = input_ids
    finished = torch.zeros(input_ids.size(0), dtype=torch.bool)
    for i in range(max_new_tokens):
        logits, past = model(cur if past is None else cur[:, -1:], past_key_values=past)
        cur, finished = step_fn(logits, cur, finished, eos_token_id=eos_token_id)
    return cur


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config()
    model = GPT2LMHeadModel(config).eval()
    cmodel = torch.compile(model, backend="eager")
    cstep = torch.compile(sample_step, backend="eager")
    digest = []
    for r in range(2):
        prompt = torch.randint(1, config.vocab_size, (2, 5))
        out = generate(cmodel, cstep, prompt, max_new_tokens=6, eos_token_id=config.eos_token_id)
        digest.append(out.tolist())
    print("digest", digest)


if __name__ == "__main__":
    main()
