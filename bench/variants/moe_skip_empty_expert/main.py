import torch


class Router(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(8, 4)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        probs = self.gate(x).softmax(-1)
        top_p, top_i = probs.max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = top_i == e
            if not sel.any():
                continue
            out[sel] = expert(x[sel]) * top_p[sel, None]
        return out


if __name__ == "__main__":
    torch.manual_seed(0)
    r = torch.compile(Router(), backend="eager")
    print(r(torch.randn(10, 8)).sum())
