import torch
import torch.nn.functional as F


def masked_lm_loss(logits, labels):
    if (labels == -100).all():
        return logits.sum() * 0.0
    return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(masked_lm_loss, backend="eager")
    lg = torch.randn(2, 3, 5)
    print(f(lg, torch.randint(0, 5, (2, 3))), f(lg, torch.full((2, 3), -100)))
