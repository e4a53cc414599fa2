import warnings

import torch


class EMA(torch.nn.Module):
    def __init__(self, decay=0.9):
        super().__init__()
        self.decay = decay

    def forward(self, ema, x):
        if torch.isnan(x).any():
            warnings.warn("NaN in the EMA input: the average is kept")
            return ema
        return ema * self.decay + x * (1 - self.decay)


def masked_mean(x, mask):
    n = mask.sum()
    if n == 0:
        print("empty mask, returning zeros")
        return torch.zeros_like(x[0])
    return (x * mask[:, None]).sum(0) / n


if __name__ == "__main__":
    torch.manual_seed(0)
    ema_c = torch.compile(EMA(), backend="eager")
    mean_c = torch.compile(masked_mean, backend="eager")
    ema = torch.zeros(3)
    for step in range(3):
        x = torch.randn(3)
        if step == 1:
            x[0] = float("nan")
        ema = ema_c(ema, x)
        print(ema)
        m = (torch.rand(4) > 0.5 * step).float() if step < 2 else torch.zeros(4)
        print(mean_c(torch.randn(4, 3), m))
