"""The TinyLM model: token + position embeddings, a stack of blocks, LM head."""
import logging
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn

from .layers import Block, LMHead

logger = logging.getLogger(__name__)


@dataclass
class TinyLMConfig:
    vocab_size: int = 64
    dim: int = 32
    n_heads: int = 2
    n_layers: int = 2
    mlp_ratio: int = 4
    max_seq_len: int = 16
    logit_cap: float = 2.25


class TinyLM(nn.Module):
    def __init__(self, config: TinyLMConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.pos = nn.Parameter(torch.zeros(config.max_seq_len, config.dim))
        self.blocks = nn.ModuleList(
            Block(i, config.dim, config.n_heads, config.mlp_ratio, config.max_seq_len)
            for i in range(config.n_layers)
        )
        self.head = LMHead(config.dim, config.vocab_size, config.logit_cap)
        nn.init.normal_(self.pos, std=0.02)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool | None = None,
    ) -> torch.Tensor:
        """Return next-token logits of shape (batch, seq, vocab)."""
        if position_ids is not None:
            warnings.warn(
                "Passing `position_ids` is deprecated; positions are derived from the sequence length",
                FutureWarning,
                stacklevel=2,
            )
        if use_cache is not None:
            # Kept for backwards compatibility with callers of the old KV-cache API.
            logger.warning("`use_cache` is deprecated and ignored: TinyLM has no KV cache")

        B, T = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        # An all-padding batch would leave every softmax row fully masked (NaN);
        # attend everywhere instead.
        if attention_mask.sum() == 0:
            attention_mask = torch.ones_like(attention_mask)

        x = self.embed(input_ids) + self.pos[:T]
        for block in self.blocks:
            x = block(x, attention_mask)
        return self.head(x)
