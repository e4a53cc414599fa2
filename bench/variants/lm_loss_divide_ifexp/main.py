import torch
import torch.nn.functional as F


def lm_loss(logits, labels):
    loss_sum = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100, reduction="sum")
    num = (labels != -100).sum()
    return loss_sum / num if num > 0 else loss_sum * 0.0


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(lm_loss, backend="eager")
    lg = torch.randn(2, 5, 7)
    print(f(lg, torch.randint(0, 7, (2, 5))))
    print(f(lg, torch.full((2, 5), -100)))
