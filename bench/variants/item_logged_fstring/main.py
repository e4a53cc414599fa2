import logging

import torch

logger = logging.getLogger("train")


def train_step(model, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss_val = loss.item()
    if loss_val > 10.0:
        logger.warning(f"high loss {loss_val:.2f}")
    return loss * 2


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    f = torch.compile(train_step, backend="eager")
    for s in (1.0, 30.0, 1.0):
        print(f(m, torch.randn(8, 4) * s, torch.randn(8, 1)))
