import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(3))

    def forward(self, h):
        for i, blk in enumerate(self.blocks):
            h = blk(h)
            m = h.abs().max().item()
            if m > 5.0:
                print(f"block {i}: activations up to {m:.1f}")
        return h


if __name__ == "__main__":
    torch.manual_seed(0)
    net = torch.compile(Net(), backend="eager")
    for s in (1.0, 20.0):
        print(net(torch.randn(2, 6) * s).sum())
