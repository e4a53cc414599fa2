import math
import time
import torch


class ModelEMA:
    def __init__(self, model, decay=0.999, tau=20):
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.decay_base = decay
        self.tau = tau
        self.updates = 0

    def decay(self):
        return self.decay_base * (1 - math.exp(-self.updates / self.tau))

    @torch.no_grad()
    def update(self, model):
        self.updates += 1
        d = self.decay()
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].mul_(d).add_(v.detach(), alpha=1 - d)


class Timer:
    def __init__(self):
        self.t0 = time.time()

    def lap(self):
        t = time.time()
        dt, self.t0 = t - self.t0, t
        return dt


def get_lr(it, warmup_iters=2, lr_decay_iters=10, learning_rate=1e-2, min_lr=1e-3):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)
