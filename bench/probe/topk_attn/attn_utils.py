import torch


def attention_entropy(probs):
    ent = -(probs * torch.log(probs.clamp_min(1e-9))).sum(-1)
    return ent.mean().item()


def sparsity_report(probs, k):
    nnz = (probs > 0).sum(-1).float().mean()
    return {"k": k, "nnz": nnz.tolist()}
