import torch


def clip_grad_report(params, max_norm):
    total = torch.norm(torch.stack([p.grad.norm() for p in params]))
    if total.item() > max_norm:
        print("clipping: norm", round(total.item(), 3))
    return total


if __name__ == "__main__":
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    f = torch.compile(clip_grad_report, backend="eager")
    for s in (0.1, 10.0):
        lin.zero_grad()
        (lin(torch.randn(3, 4) * s).sum() * s).backward()
        print(f(list(lin.parameters()), 1.0))
