import torch


def clip_and_scale(grad_norm, max_norm, lr):
    if grad_norm > max_norm:
        lr = lr * max_norm / grad_norm
    return lr


def step(w, g):
    gn = g.norm()
    lr = clip_and_scale(gn, 1.0, 0.1)
    return w - lr * g


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(step, backend="eager")
    w = torch.randn(5)
    print(f(w, torch.randn(5) * 0.1), f(w, torch.randn(5) * 10))
