import numpy as np
import torch


def compute_mask_indices(shape, mask_prob, mask_length, attention_mask=None, min_masks=0):
    """Adapted from fairseq / HF wav2vec2 (numpy implementation)."""
    batch_size, sequence_length = shape
    epsilon = np.random.rand(1).item()

    def compute_num_masked_span(input_length):
        num_masked_span = int(mask_prob * input_length / mask_length + epsilon)
        num_masked_span = max(num_masked_span, min_masks)
        if num_masked_span * mask_length > sequence_length:
            num_masked_span = sequence_length // mask_length
        return num_masked_span

    input_lengths = (
        attention_mask.sum(-1).detach().tolist() if attention_mask is not None else [sequence_length] * batch_size
    )
    spec_aug_mask = np.zeros((batch_size, sequence_length), dtype=bool)
    max_num_masked_span = compute_num_masked_span(sequence_length)
    idxs = []
    for input_length in input_lengths:
        n = compute_num_masked_span(input_length)
        starts = np.random.choice(np.arange(input_length - (mask_length - 1)), n, replace=False)
        if len(starts) == 0:
            starts = np.array([sequence_length - 1])
        starts = np.concatenate([starts, np.ones(max_num_masked_span - n, dtype=np.int64) * starts[0]])
        idxs.append(starts)
    idxs = np.array(idxs)
    idxs = np.broadcast_to(idxs[:, :, None], (batch_size, max_num_masked_span, mask_length))
    idxs = idxs.reshape(batch_size, max_num_masked_span * mask_length)
    offsets = np.arange(mask_length)[None, None, :]
    offsets = np.broadcast_to(offsets, (batch_size, max_num_masked_span, mask_length)).reshape(batch_size, -1)
    idxs = np.minimum(idxs + offsets, sequence_length - 1)
    np.put_along_axis(spec_aug_mask, idxs, 1, -1)
    return spec_aug_mask


def feat_extract_output_lengths(input_lengths, kernels, strides):
    for k, s in zip(kernels, strides):
        input_lengths = torch.div(input_lengths - k, s, rounding_mode="floor") + 1
    return input_lengths
