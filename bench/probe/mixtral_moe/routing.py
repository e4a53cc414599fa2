import logging

import torch

logger = logging.getLogger("moe.routing")


def load_balancing_loss(router_probs, expert_mask, num_experts):
    tokens_per_expert = expert_mask.float().mean(0)
    router_prob_per_expert = router_probs.mean(0)
    return num_experts * torch.sum(tokens_per_expert * router_prob_per_expert)


def log_expert_usage(counts):
    usage = counts.tolist()
    if min(usage) == 0:
        logger.warning("some experts received no tokens: %s", usage)
    return usage
