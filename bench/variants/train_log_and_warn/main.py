import logging

import torch

log = logging.getLogger(__name__)


def train_step(model, opt_loss_scale, x, y, epoch):
    loss = torch.nn.functional.mse_loss(model(x), y) * opt_loss_scale
    log.info("epoch %d loss %.3f", epoch, loss)
    if loss > 100:
        log.warning("loss exploded: %s", loss.item())
    return loss


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    f = torch.compile(train_step, backend="eager")
    for e in range(2):
        print(f(m, 1.0, torch.randn(5, 4) * (e * 30 + 1), torch.randn(5, 1), e))
