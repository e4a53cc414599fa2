import torch


def masked_mean(x, mask):
    n = int(mask.sum())
    if n == 0:
        raise RuntimeError("empty mask")
    return (x * mask).sum() / n


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(masked_mean, backend="eager")
    for _ in range(3):
        x = torch.randn(10)
        print(f(x, x > 0))
