import torch


class DropPath(torch.nn.Module):
    def __init__(self, p=0.2):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1) > self.p
        if keep.all():
            return x
        return x * keep / (1 - self.p)


if __name__ == "__main__":
    torch.manual_seed(0)
    m = torch.compile(DropPath(), backend="eager")
    for _ in range(3):
        print(m(torch.ones(4, 2)).sum())
