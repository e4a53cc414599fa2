import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from config import T5Config, warn_once

torch.set_num_threads(1)
torch.manual_seed(2024)


class T5Attention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False, is_decoder=False):
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.num_buckets = config.relative_attention_num_buckets
        self.max_distance = config.relative_attention_max_distance
        self.d_model = config.d_model
        self.n_heads = config.num_heads
        self.key_value_proj_dim = config.d_model // config.num_heads
        self.q = nn.Linear(self.d_model, self.d_model, bias=False)
        self.k = nn.Linear(self.d_model, self.d_model, bias=False)
        self.v = nn.Linear(self.d_model, self.d_model, bias=False)
        self.o = nn.Linear(self.d_model, self.d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder),
            num_buckets=self.num_buckets, max_distance=self.max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        kv = hidden_states if key_value_states is None else key_value_states
        key_length = kv.shape[1]

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        q, k, v = shape(self.q(hidden_states)), shape(self.k(kv)), shape(self.v(kv))
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, seq_length, key_length), dtype=scores.dtype)
            else:
                position_bias = self.compute_bias(seq_length, key_length)
            if mask is not None:
                position_bias = position_bias + mask
        scores += position_bias
        if scores.max() > 1e4:
            warn_once("attention logits overflow risk")
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = torch.matmul(attn_weights, v).transpose(1, 2).contiguous().view(batch_size, -1, self.d_model)
        return self.o(attn_output), position_bias


class T5Small(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.enc_attn = T5Attention(config, has_relative_attention_bias=True)
        self.dec_self = T5Attention(config, has_relative_attention_bias=True, is_decoder=True)
        self.dec_cross = T5Attention(config, is_decoder=True)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def encode(self, input_ids, attention_mask):
        ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        h = self.shared(input_ids)
        a, _ = self.enc_attn(h, mask=ext)
        return h + a, ext

    def decode_step(self, dec_ids, enc, enc_mask):
        L = dec_ids.shape[1]
        causal = torch.triu(torch.full((L, L), torch.finfo(torch.float32).min), 1)[None, None]
        h = self.shared(dec_ids)
        a, _ = self.dec_self(h, mask=causal)
        h = h + a
        c, _ = self.dec_cross(h, mask=enc_mask, key_value_states=enc)
        h = h + c
        return self.lm_head(h[:, -1])

    def generate(self, input_ids, attention_mask):
        enc, enc_mask = self.encode(input_ids, attention_mask)
        B = input_ids.shape[0]
        dec = torch.full((B, 1), self.config.decoder_start_token_id, dtype=torch.long)
        finished = torch.zeros(B, dtype=torch.bool)
        scores = []
        while not finished.all() and dec.shape[1] <= self.config.max_new_tokens:
            logits = self.decode_step(dec, enc, enc_mask)
            nxt = logits.argmax(-1)
            nxt = torch.where(finished, torch.full_like(nxt, self.config.eos_token_id), nxt)
            scores.append(logits.log_softmax(-1).max(-1).values)
            dec = torch.cat([dec, nxt[:, None]], dim=1)
            finished |= nxt == self.config.eos_token_id
        return dec, torch.stack(scores, 1)


model = T5Small(T5Config()).eval()
gen = torch.compile(model.generate, backend="eager")
digest = []
with torch.no_grad():
    for _ in range(3):
        ids = torch.randint(2, 48, (2, 7))
        am = torch.ones_like(ids)
        am[0, -2:] = 0
        dec, sc = gen(ids, am)
        digest += [dec.tolist(), round(sc.sum().item(), 4)]
print("digest", digest)
