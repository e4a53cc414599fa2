import torch
import torch.nn as nn
import torch.nn.functional as F

from rewards import length_penalty

torch.set_num_threads(1)
torch.manual_seed(11)

VOCAB = 32
EOS = 1


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32)
        self.rnn = nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.head(h)


def selective_log_softmax(logits, index):
    logps = []
    for row_logits, row_labels in zip(logits, index):
        row_logps = F.log_softmax(row_logits, dim=-1)
        logps.append(row_logps.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1))
    return torch.stack(logps)


class GRPOLoss:
    def __init__(self, policy, ref_policy, beta=0.04, epsilon=0.2, num_generations=4, scale_rewards=True):
        self.policy = policy
        self.ref = ref_policy
        self.beta = beta
        self.epsilon = epsilon
        self.num_generations = num_generations
        self.scale_rewards = scale_rewards
        self.metrics = {"kl": [], "clip_ratio": [], "reward": [], "reward_std": []}

    def compute_advantages(self, rewards):
        mean_grouped = rewards.view(-1, self.num_generations).mean(dim=1)
        std_grouped = rewards.view(-1, self.num_generations).std(dim=1)
        mean_grouped = mean_grouped.repeat_interleave(self.num_generations, dim=0)
        std_grouped = std_grouped.repeat_interleave(self.num_generations, dim=0)
        advantages = rewards - mean_grouped
        if self.scale_rewards and (std_grouped > 1e-4).all():
            advantages = advantages / (std_grouped + 1e-4)
        self.metrics["reward"].append(rewards.mean().item())
        self.metrics["reward_std"].append(std_grouped.mean().item())
        return advantages

    def __call__(self, prompt_ids, completion_ids, old_logps, rewards):
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        logits_to_keep = completion_ids.size(1)
        logits = self.policy(input_ids)[:, -logits_to_keep - 1:-1]
        per_token_logps = selective_log_softmax(logits, completion_ids)
        with torch.no_grad():
            ref_logits = self.ref(input_ids)[:, -logits_to_keep - 1:-1]
            ref_logps = selective_log_softmax(ref_logits, completion_ids)
        is_eos = completion_ids == EOS
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
        seq_idx = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1)
        completion_mask = (seq_idx <= eos_idx.unsqueeze(1)).int()

        lengths = length_penalty(completion_ids, logits_to_keep)
        rewards = rewards - 0.01 * lengths
        advantages = self.compute_advantages(rewards)

        per_token_kl = torch.exp(ref_logps - per_token_logps) - (ref_logps - per_token_logps) - 1
        coef_1 = torch.exp(per_token_logps - old_logps)
        coef_2 = torch.clamp(coef_1, 1 - self.epsilon, 1 + self.epsilon)
        per_token_loss1 = coef_1 * advantages.unsqueeze(1)
        per_token_loss2 = coef_2 * advantages.unsqueeze(1)
        per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
        if self.beta != 0.0:
            per_token_loss = per_token_loss + self.beta * per_token_kl
        loss = ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()

        mean_kl = ((per_token_kl * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()
        self.metrics["kl"].append(round(mean_kl.item(), 5))
        is_clipped = (per_token_loss1 < per_token_loss2).float()
        clip_ratio = (is_clipped * completion_mask).sum() / completion_mask.sum()
        self.metrics["clip_ratio"].append(clip_ratio.item())
        return loss


policy = Policy()
ref = Policy()
ref.load_state_dict(policy.state_dict())
opt = torch.optim.SGD(policy.parameters(), lr=0.1)
grpo = GRPOLoss(policy, ref)
loss_fn = torch.compile(grpo.__call__, backend="eager")
digest = []
for step in range(3):
    prompt = torch.randint(2, VOCAB, (8, 4))
    completion = torch.randint(0, VOCAB, (8, 6))
    rewards = torch.rand(8)
    with torch.no_grad():
        old = selective_log_softmax(policy(torch.cat([prompt, completion], 1))[:, 3:-1], completion)
    loss = loss_fn(prompt, completion, old, rewards)
    loss.backward()
    opt.step()
    opt.zero_grad()
    digest.append(round(loss.item(), 5))
print("metrics", {k: [round(x, 4) for x in v] for k, v in grpo.metrics.items()})
print("digest", digest)
