import logging

import torch

logger = logging.getLogger("train")


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 1)

    def forward(self, x, y):
        loss = ((self.proj(x).squeeze(-1) - y) ** 2).mean() / (y.abs().sum() > 0)
        if not torch.isfinite(loss):
            logger.warning("non-finite loss %s, skipping the step", loss.item())
            loss = torch.zeros_like(loss)
        return loss


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    torch.manual_seed(0)
    m = torch.compile(Head(), backend="eager")
    x = torch.randn(3, 4)
    total = 0.0
    with torch.no_grad():  # a validation pass: a batch whose loss is not finite counts 0
        for y in (torch.randn(3), torch.zeros(3), torch.randn(3)):
            loss = m(x, y)
            total += loss
            print(round(loss.item(), 5))
    print(total)
