import logging
import warnings
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from masking import compute_mask_indices, feat_extract_output_lengths

logger = logging.getLogger(__name__)
logging.basicConfig(level=logging.WARNING)


class FeatureEncoder(nn.Module):
    def __init__(self, dims=(32, 32, 32), kernels=(10, 3, 3), strides=(5, 2, 2)):
        super().__init__()
        self.kernels, self.strides = kernels, strides
        layers, c_in = [], 1
        for d, k, s in zip(dims, kernels, strides):
            layers.append(nn.Sequential(nn.Conv1d(c_in, d, k, s, bias=False), nn.GELU()))
            c_in = d
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, x):
        x = x[:, None]
        for conv in self.conv_layers:
            x = conv(x)
        return x


class Wav2Vec2Model(nn.Module):
    def __init__(self, hidden=48, mask_time_prob=0.2, mask_time_length=3, apply_spec_augment=True):
        super().__init__()
        self.feature_extractor = FeatureEncoder()
        self.feature_projection = nn.Linear(32, hidden)
        self.layer_norm = nn.LayerNorm(32)
        self.masked_spec_embed = nn.Parameter(torch.rand(hidden))
        layer = nn.TransformerEncoderLayer(hidden, 4, 96, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.mask_time_prob = mask_time_prob
        self.mask_time_length = mask_time_length
        self.apply_spec_augment = apply_spec_augment

    def _mask_hidden_states(self, hidden_states, attention_mask=None):
        if not self.apply_spec_augment:
            return hidden_states
        if self.mask_time_prob > 0:
            mask_time_indices = compute_mask_indices(
                hidden_states.shape[:2], self.mask_time_prob, self.mask_time_length,
                attention_mask=attention_mask, min_masks=2,
            )
            mask_time_indices = torch.tensor(mask_time_indices, device=hidden_states.device, dtype=torch.bool)
            hidden_states[mask_time_indices] = self.masked_spec_embed.to(hidden_states.dtype)
        return hidden_states

    def forward(self, input_values, attention_mask=None):
        if input_values.abs().max() > 1.0:
            warnings.warn("input_values not normalized to [-1, 1]")
        extract_features = self.feature_extractor(input_values).transpose(1, 2)
        extract_features = self.layer_norm(extract_features)
        if attention_mask is not None:
            output_lengths = feat_extract_output_lengths(attention_mask.sum(-1), self.feature_extractor.kernels,
                                                         self.feature_extractor.strides)
            attention_mask = torch.zeros(extract_features.shape[:2], dtype=torch.long)
            attention_mask[(torch.arange(attention_mask.shape[0]), output_lengths - 1)] = 1
            attention_mask = attention_mask.flip([-1]).cumsum(-1).flip([-1]).bool()
        hidden_states = self.feature_projection(extract_features)
        hidden_states = self._mask_hidden_states(hidden_states, attention_mask)
        pad_mask = ~attention_mask if attention_mask is not None else None
        out = self.encoder(hidden_states, src_key_padding_mask=pad_mask)
        n_masked = int((out == 0).sum())
        if n_masked:
            logger.warning("found %d exact zeros in encoder output", n_masked)
        return out


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    model = Wav2Vec2Model().train()
    model.encoder.layers[0].dropout.p = 0.0
    cmodel = torch.compile(model, backend="eager")
    digest = []
    for step in range(3):
        wav = torch.randn(2, 1600).clamp(-1.2, 1.2) * (0.8 + 0.1 * step)
        attn = torch.ones(2, 1600, dtype=torch.long)
        attn[1, 1200:] = 0
        out = cmodel(wav, attention_mask=attn)
        digest.append(round((out * torch.linspace(0, 1, out.shape[-1])).sum().item(), 4))
    print("digest", digest)


if __name__ == "__main__":
    main()
