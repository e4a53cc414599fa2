import logging

import torch
import torch.nn as nn
import torch.nn.functional as F

from routing import load_balancing_loss, log_expert_usage

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
torch.set_num_threads(1)
torch.manual_seed(0)


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden_dim, ffn_dim):
        super().__init__()
        self.w1 = nn.Linear(hidden_dim, ffn_dim, bias=False)
        self.w2 = nn.Linear(ffn_dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(hidden_dim, ffn_dim, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        return self.w2(current_hidden_states)


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, hidden_dim=32, ffn_dim=64, num_experts=8, top_k=2):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.num_experts = num_experts
        self.top_k = top_k
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False)
        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(hidden_dim, ffn_dim) for _ in range(num_experts)])
        self.jitter_noise = 0.0

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)

        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            if top_x.shape[0] == 0:
                continue
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))

        counts = expert_mask.sum(dim=(1, 2))
        usage = log_expert_usage(counts)
        aux = load_balancing_loss(F.softmax(router_logits, dim=-1), expert_mask.sum(1).T, self.num_experts)
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits, aux


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.moe = MixtralSparseMoeBlock()
        self.norm = nn.LayerNorm(32)

    def forward(self, ids):
        h = self.embed(ids)
        out, router_logits, aux = self.moe(self.norm(h))
        h = h + out
        if aux > 2.0:
            logging.getLogger("moe").info("high aux loss %.3f", aux)
        return h, aux


model = Model().eval()
cmodel = torch.compile(model, backend="eager")
digest = []
with torch.no_grad():
    for step in range(3):
        ids = torch.randint(0, 50, (2, 16))
        h, aux = cmodel(ids)
        digest.append(round(h.sum().item(), 3))
        digest.append(round(aux.item(), 4))
print("digest", digest)
