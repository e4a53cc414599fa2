import warnings

import torch


class MoEGate(torch.nn.Module):
    def __init__(self, n_experts=4):
        super().__init__()
        self.n_experts = n_experts
        self.gate = torch.nn.Linear(8, n_experts)

    def forward(self, x):
        idx = self.gate(x).argmax(-1)
        tokens_per_expert = torch.bincount(idx, minlength=self.n_experts)
        if self.training and tokens_per_expert.min() == 0:
            warnings.warn("an expert received no tokens")
        return idx, tokens_per_expert


if __name__ == "__main__":
    torch.manual_seed(0)
    m = torch.compile(MoEGate(), backend="eager")
    print(m(torch.randn(3, 8)))
