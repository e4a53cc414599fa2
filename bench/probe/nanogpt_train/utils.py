import time


class Timer:
    def __init__(self):
        self.t0 = time.perf_counter()

    def lap(self):
        t1 = time.perf_counter()
        dt = t1 - self.t0
        self.t0 = t1
        return dt


def get_lr(it, warmup_iters=2, lr_decay_iters=10, learning_rate=6e-4, min_lr=6e-5):
    import math
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)
