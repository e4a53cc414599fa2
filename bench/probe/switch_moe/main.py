import math
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(42)


class SwitchFeedForward(nn.Module):
    """Switch Transformer routing (top-1) with expert capacity, written from scratch."""

    def __init__(self, d_model=32, d_ff=64, n_experts=4, capacity_factor=1.0, drop_tokens=True,
                 is_scale_prob=True):
        super().__init__()
        self.n_experts = n_experts
        self.capacity_factor = capacity_factor
        self.drop_tokens = drop_tokens
        self.is_scale_prob = is_scale_prob
        self.experts = nn.ModuleList([
            nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
            for _ in range(n_experts)
        ])
        self.switch = nn.Linear(d_model, n_experts)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        seq_len, batch_size, d_model = x.shape
        x = x.view(-1, d_model)
        route_prob = self.softmax(self.switch(x))
        route_prob_max, routes = torch.max(route_prob, dim=-1)
        route_prob_max = route_prob_max.clamp(min=1e-6) if (route_prob_max < 1e-6).any() else route_prob_max

        indexes_list = [torch.eq(routes, i).nonzero(as_tuple=True)[0] for i in range(self.n_experts)]
        final_output = x.new_zeros(x.shape)
        capacity = int(self.capacity_factor * len(x) / self.n_experts)
        counts = x.new_tensor([len(indexes_list[i]) for i in range(self.n_experts)])

        dropped = []
        if self.drop_tokens:
            for i in range(self.n_experts):
                if len(indexes_list[i]) <= capacity:
                    continue
                indexes_list[i] = indexes_list[i][torch.randperm(len(indexes_list[i]))]
                dropped.append(indexes_list[i][capacity:])
                indexes_list[i] = indexes_list[i][:capacity]

        expert_output = [self.experts[i](x[indexes_list[i], :]) for i in range(self.n_experts)]
        for i in range(self.n_experts):
            final_output[indexes_list[i], :] = expert_output[i]

        if dropped:
            dropped = torch.cat(dropped)
            final_output[dropped, :] = x[dropped, :]

        if self.is_scale_prob:
            final_output = final_output * route_prob_max.view(-1, 1)
        else:
            final_output = final_output * (route_prob_max / route_prob_max.detach()).view(-1, 1)

        final_output = final_output.view(seq_len, batch_size, d_model)
        return final_output, counts, route_prob.sum(0), len(dropped), route_prob_max


def entropy_check(route_prob):
    ent = -(route_prob * route_prob.clamp_min(1e-9).log()).sum(-1).mean()
    if ent < 0.1 * math.log(route_prob.shape[-1]):
        warnings.warn("router collapsed: entropy %.3f" % ent)
    return ent


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = SwitchFeedForward()
        self.ln = nn.LayerNorm(32)

    def forward(self, x):
        scale = x.abs().max().item()
        if scale > 3.0:
            x = x / scale
        out, counts, route_prob_sum, n_dropped, route_prob_max = self.ff(self.ln(x))
        ent = entropy_check(F.softmax(self.ff.switch(self.ln(x)), -1))
        load = counts / counts.sum()
        balance = float(np.std(load.numpy()))
        return x + out, ent, balance


model = Model().eval()
cmodel = torch.compile(model, backend="eager")
digest = []
with torch.no_grad():
    for _ in range(3):
        x = torch.randn(8, 2, 32)
        y, ent, balance = cmodel(x)
        digest += [round(y.sum().item(), 3), round(ent.item(), 4), round(balance, 4)]
print("digest", digest)
