import logging

import torch

logger = logging.getLogger("train")


def train_step(model, x, y, step: int):
    loss = torch.nn.functional.mse_loss(model(x), y)
    print(f"step {step}: loss={loss:.4f}")
    logger.info(f"step {step} loss {loss.item():.3f}")
    return loss


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    f = torch.compile(train_step, backend="eager")
    for s in range(2):
        f(m, torch.randn(8, 4), torch.randn(8, 1), s)
