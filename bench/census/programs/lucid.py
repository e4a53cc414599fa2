"""Census programs on x-transformers, vector-quantize-pytorch and rotary-embedding-torch (misc environment).

    python bench/census/programs/lucid.py NAME
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from census import Program, main

V = 64


def xt_decoder_train(c):
    from x_transformers import Decoder, TransformerWrapper
    m = TransformerWrapper(num_tokens=V, max_seq_len=32, attn_layers=Decoder(dim=32, depth=2, heads=4))
    ids = c.ids(2, 16, vocab=V)
    c.train_steps(m, dict(x=ids, mask=c.pad_mask(2, 16).bool()), loss_fn=lambda out: out.float().pow(2).mean())


def xt_decoder_rotary_eval(c):
    from x_transformers import Decoder, TransformerWrapper
    m = TransformerWrapper(num_tokens=V, max_seq_len=32,
                           attn_layers=Decoder(dim=32, depth=2, heads=4, rotary_pos_emb=True, attn_flash=False,
                                               ff_glu=True, use_rmsnorm=True))
    c.eval_calls(m, dict(x=c.ids(2, 16, vocab=V), mask=c.pad_mask(2, 16).bool()))


def xt_generate(c):
    from x_transformers import AutoregressiveWrapper, Decoder, TransformerWrapper
    m = AutoregressiveWrapper(TransformerWrapper(num_tokens=V, max_seq_len=32,
                                                 attn_layers=Decoder(dim=32, depth=2, heads=4)))
    m.eval()
    m.net = c.compile(m.net)
    with torch.no_grad():
        for i in range(2):
            c.record(f"gen{i}", m.generate(c.ids(2, 4, vocab=V), 6, temperature=0.0))


def xt_encoder_eval(c):
    from x_transformers import Encoder, TransformerWrapper
    m = TransformerWrapper(num_tokens=V, max_seq_len=32,
                           attn_layers=Encoder(dim=32, depth=2, heads=4, rel_pos_bias=True, residual_attn=True))
    c.eval_calls(m, dict(x=c.ids(2, 16, vocab=V), mask=c.pad_mask(2, 16).bool()))


def xt_xl_memory_eval(c):
    from x_transformers import Decoder, TransformerWrapper
    m = TransformerWrapper(num_tokens=V, max_seq_len=16, max_mem_len=16,
                           attn_layers=Decoder(dim=32, depth=2, heads=4, rel_pos_bias=True))
    m.eval()
    cm = c.compile(m)
    mems = None
    with torch.no_grad():
        for i in range(2):
            logits, mems = cm(c.ids(2, 8, vocab=V), mems=mems, return_mems=True)
            c.record(f"call{i}", logits)


def xt_vit_eval(c):
    from x_transformers import Encoder, ViTransformerWrapper
    m = ViTransformerWrapper(image_size=32, patch_size=8, num_classes=5, attn_layers=Encoder(dim=32, depth=2, heads=4))
    c.eval_calls(m, dict(img=torch.randn(2, 3, 32, 32)))


def xt_continuous_eval(c):
    from x_transformers import ContinuousTransformerWrapper, Decoder
    m = ContinuousTransformerWrapper(dim_in=8, dim_out=8, max_seq_len=32, attn_layers=Decoder(dim=32, depth=2, heads=4))
    c.eval_calls(m, dict(x=torch.randn(2, 16, 8), mask=c.pad_mask(2, 16).bool()))


def xt_moe_like_eval(c):
    from x_transformers import Decoder, TransformerWrapper
    m = TransformerWrapper(num_tokens=V, max_seq_len=32, attn_layers=Decoder(dim=32, depth=2, heads=4,
                                                                             attn_num_mem_kv=2, layer_dropout=0.1,
                                                                             sandwich_norm=True))
    c.eval_calls(m, dict(x=c.ids(2, 16, vocab=V)))


def vq_train(c):
    from vector_quantize_pytorch import VectorQuantize
    m = VectorQuantize(dim=16, codebook_size=32, commitment_weight=1.0, learnable_codebook=True, ema_update=False,
                       rotation_trick=False)
    x = torch.randn(2, 20, 16)
    c.train_steps(m, dict(x=x), loss_fn=lambda out: out[0].pow(2).mean() + out[2].sum())


def vq_kmeans_eval(c):
    from vector_quantize_pytorch import VectorQuantize
    m = VectorQuantize(dim=16, codebook_size=32, kmeans_init=True, kmeans_iters=2, threshold_ema_dead_code=2)
    m.train()
    cm = c.compile(m)
    for i in range(2):
        q, idx, loss = cm(torch.randn(2, 20, 16))
        c.record(f"call{i}", (q, idx, loss))


def rvq_eval(c):
    from vector_quantize_pytorch import ResidualVQ
    m = ResidualVQ(dim=16, num_quantizers=3, codebook_size=32, quantize_dropout=True)
    m.train()
    cm = c.compile(m)
    with torch.no_grad():
        for i in range(2):
            c.record(f"call{i}", cm(torch.randn(2, 20, 16)))


def fsq_eval(c):
    from vector_quantize_pytorch import FSQ
    c.eval_calls(FSQ(levels=[8, 5, 5]), dict(z=torch.randn(2, 20, 3)))


def lfq_train(c):
    from vector_quantize_pytorch import LFQ
    m = LFQ(codebook_size=64, dim=16, entropy_loss_weight=0.1)
    c.train_steps(m, dict(x=torch.randn(2, 16, 4, 4)), loss_fn=lambda out: out[0].pow(2).mean() + out[2])


def residual_fsq_eval(c):
    from vector_quantize_pytorch import ResidualFSQ
    c.eval_calls(ResidualFSQ(dim=16, levels=[8, 5, 5], num_quantizers=2), dict(x=torch.randn(2, 20, 16)))


def simvq_eval(c):
    from vector_quantize_pytorch import SimVQ
    c.eval_calls(SimVQ(dim=16, codebook_size=32), dict(x=torch.randn(2, 20, 16)))


def rotary_eval(c):
    from rotary_embedding_torch import RotaryEmbedding
    rot = RotaryEmbedding(dim=8)
    q = torch.randn(2, 4, 16, 16)

    def f(q, k):
        return rot.rotate_queries_or_keys(q), rot.rotate_queries_or_keys(k)
    c.call_fn(f, (q, q + 1))


def rotary_xpos_eval(c):
    from rotary_embedding_torch import RotaryEmbedding
    rot = RotaryEmbedding(dim=8, use_xpos=True)
    q = torch.randn(2, 4, 16, 16)
    c.call_fn(rot.rotate_queries_and_keys, (q, q + 1))


def rotary_axial_eval(c):
    from rotary_embedding_torch import RotaryEmbedding
    rot = RotaryEmbedding(dim=8, freqs_for="pixel", max_freq=64)
    c.call_fn(lambda: rot.get_axial_freqs(4, 4))


PROGRAMS = {name: Program(fn) for name, fn in list(globals().items())
            if callable(fn) and getattr(fn, "__module__", None) == __name__ and name.endswith(("_train", "_eval", "_generate"))}

if __name__ == "__main__":
    main(PROGRAMS)
