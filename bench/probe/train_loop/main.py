import torch
import torch.nn as nn
import torch.nn.functional as F
from train_utils import ModelEMA, Timer, get_lr


class MLPClassifier(nn.Module):
    def __init__(self, d_in=32, hidden=64, n_cls=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_cls))

    def forward(self, x, y=None):
        logits = self.net(x)
        loss = F.cross_entropy(logits, y) if y is not None else None
        if loss is not None and not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {loss}")
        return logits, loss


class LossScaler:
    """Minimal dynamic loss scaler in the style of apex/fairseq."""

    def __init__(self, init_scale=2.0 ** 10, scale_factor=2.0, scale_window=4):
        self.loss_scale = init_scale
        self.scale_factor = scale_factor
        self.scale_window = scale_window
        self._iter = 0
        self._last_overflow_iter = -1

    def scale(self, loss):
        return loss * self.loss_scale

    def has_overflow(self, params):
        for p in params:
            if p.grad is not None and not torch.isfinite(p.grad).all():
                return True
        return False

    def update_scale(self, overflow):
        if overflow:
            self.loss_scale /= self.scale_factor
            self._last_overflow_iter = self._iter
        elif (self._iter - self._last_overflow_iter) % self.scale_window == 0:
            self.loss_scale *= self.scale_factor
        self._iter += 1


def optimizer_step(model, optimizer, scaler, ema, total, grad_clip, it, lr, timer, log_every=1):
    params = [p for p in model.parameters()]
    overflow = scaler.has_overflow(params)
    scaler.update_scale(overflow)
    if overflow:
        print(f"iter {it}: gradient overflow, skipping step, new scale {scaler.loss_scale}")
        optimizer.zero_grad(set_to_none=True)
        return total
    for p in params:
        p.grad.div_(scaler.loss_scale if not overflow else 1.0)
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    if grad_norm > grad_clip * 10:
        print(f"iter {it}: large grad norm {grad_norm:.3f}")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update(model)
    dt = timer.lap()
    if it % log_every == 0:
        print(f"iter {it}: loss {total:.4f}, lr {lr:.5f}, scale {scaler.loss_scale}")
    return total


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MLPClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scaler = LossScaler()
    ema = ModelEMA(model)
    cmodel = torch.compile(model, backend="eager")
    step = torch.compile(optimizer_step, backend="eager")
    digest = []
    for it in range(3):
        batches = [(torch.randn(8, 32), torch.randint(0, 4, (8,))) for _ in range(2)]
        lr = get_lr(it)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        timer = Timer()
        total = 0.0
        for micro_step, (x, y) in enumerate(batches):
            _, loss = cmodel(x, y)
            loss = loss / len(batches)
            scaler.scale(loss).backward()
            total += loss.item()
        total = step(model, optimizer, scaler, ema, total, 1.0, it, lr, timer)
        digest.append(round(total, 5))
    digest.append(round(sum(v.sum().item() for v in ema.shadow.values()), 4))
    print("digest", digest)


if __name__ == "__main__":
    main()
