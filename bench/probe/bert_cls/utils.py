import warnings
import functools

_warned = set()


def deprecate(name, version, message):
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(f"`{name}` is deprecated and will be removed in {version}. {message}", FutureWarning)


def get_extended_attention_mask(attention_mask, dtype):
    extended = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - extended) * torch_finfo_min(dtype)


def torch_finfo_min(dtype):
    import torch
    return torch.finfo(dtype).min
