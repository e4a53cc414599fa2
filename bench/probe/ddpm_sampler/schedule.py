import math

import numpy as np
import torch


def cosine_beta_schedule(timesteps, s=0.008):
    steps = timesteps + 1
    x = torch.linspace(0, timesteps, steps, dtype=torch.float64)
    alphas_cumprod = torch.cos(((x / timesteps) + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return torch.clip(betas, 0, 0.999)


def extract(a, t, x_shape):
    b, *_ = t.shape
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


def deprecate(name, version, message):
    import warnings
    warnings.warn(f"{name} is deprecated and will be removed in {version}. {message}", FutureWarning, stacklevel=3)


def to_numpy_sigma(alpha_bar):
    return np.sqrt((1 - alpha_bar) / alpha_bar)
