import torch
import torch.nn as nn
import torch.nn.functional as F

from gate import Gate

torch.set_num_threads(1)
torch.manual_seed(99)


class Expert(nn.Module):
    def __init__(self, dim, inter_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim)
        self.w2 = nn.Linear(inter_dim, dim)
        self.w3 = nn.Linear(dim, inter_dim)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    def __init__(self, dim=32, moe_inter_dim=32, n_routed_experts=8, n_shared_experts=1, n_activated_experts=2,
                 n_expert_groups=2, n_limited_groups=1):
        super().__init__()
        self.dim = dim
        self.n_routed_experts = n_routed_experts
        self.n_activated_experts = n_activated_experts
        self.gate = Gate(dim, n_routed_experts, n_activated_experts, n_expert_groups, n_limited_groups)
        self.experts = nn.ModuleList([Expert(dim, moe_inter_dim) for _ in range(n_routed_experts)])
        self.shared_experts = Expert(dim, n_shared_experts * moe_inter_dim)
        self.stats = []

    def forward(self, x):
        shape = x.size()
        x = x.view(-1, self.dim)
        weights, indices = self.gate(x)
        y = torch.zeros_like(x)
        counts = torch.bincount(indices.flatten(), minlength=self.n_routed_experts).tolist()
        for i in range(self.n_routed_experts):
            if counts[i] == 0:
                continue
            expert = self.experts[i]
            idx, top = torch.where(indices == i)
            y[idx] += expert(x[idx]) * weights[idx, top, None]
        z = self.shared_experts(x)
        self.stats.append(max(counts) / max(1, sum(counts)))
        return (y + z).view(shape)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 32)
        self.layers = nn.ModuleList([MoE() for _ in range(2)])
        self.norm = nn.RMSNorm(32)
        self.head = nn.Linear(32, 40)

    def forward(self, tokens):
        h = self.emb(tokens)
        for layer in self.layers:
            h = h + layer(self.norm(h))
        return self.head(self.norm(h))


model = Model().eval()
cmodel = torch.compile(model, backend="eager")
digest = []
with torch.no_grad():
    for _ in range(3):
        out = cmodel(torch.randint(0, 40, (2, 8)))
        digest.append(round(out.sum().item(), 3))
print("stats", [round(s, 3) for s in model.layers[0].stats])
print("digest", digest)
