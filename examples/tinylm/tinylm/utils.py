"""Small helpers shared by the model code and the training script."""
import torch


def check_finite(x: torch.Tensor, where: str) -> torch.Tensor:
    """Fail loudly as soon as activations go bad instead of training on garbage."""
    if torch.isnan(x).any():
        raise ValueError(f"NaN in activations ({where})")
    return x


def make_batches(
    n_batches: int,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    seed: int,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Synthetic next-token data with right padding, from a seeded generator.

    Returns (input_ids, targets, attention_mask) triples; padded target
    positions are -100 so cross_entropy ignores them.
    """
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        tokens = torch.randint(0, vocab_size, (batch_size, seq_len + 1), generator=g)
        lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=g)
        mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()
        inputs = tokens[:, :-1] * mask
        targets = tokens[:, 1:].masked_fill(mask == 0, -100)
        batches.append((inputs, targets, mask))
    return batches
