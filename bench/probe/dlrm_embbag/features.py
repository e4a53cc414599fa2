import torch


def to_offsets(lengths):
    return torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])


def hash_ids(ids, num_buckets):
    return torch.remainder(ids * 2654435761, num_buckets)


def validate_jagged(values, offsets, name):
    if offsets.numel() and offsets[-1] > values.numel():
        raise ValueError(f"feature {name}: offsets exceed values ({offsets[-1]} > {values.numel()})")
