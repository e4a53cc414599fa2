import math
import warnings


class KLAnnealer:
    def __init__(self, total_steps=10, n_cycles=2, ratio=0.5, mode="cyclical"):
        self.total_steps, self.n_cycles, self.ratio, self.mode = total_steps, n_cycles, ratio, mode
        self.step = 0

    def beta(self):
        if self.mode == "linear":
            return min(1.0, self.step / self.total_steps)
        elif self.mode == "cyclical":
            period = self.total_steps / self.n_cycles
            tau = (self.step % period) / period
            return min(1.0, tau / self.ratio)
        elif self.mode == "sigmoid":
            return 1.0 / (1.0 + math.exp(-(self.step - self.total_steps / 2)))
        else:
            warnings.warn(f"unknown annealing mode {self.mode}, using beta=1")
            return 1.0

    def advance(self):
        self.step += 1


def check_posterior_collapse(kl_per_dim, threshold=0.01):
    active = (kl_per_dim > threshold).sum()
    if active == 0:
        warnings.warn("posterior collapse: no active latent units")
    return active
