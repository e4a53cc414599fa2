import torch
import torch.nn.functional as F


def masked_loss(logits, labels):
    valid = labels != -100
    loss = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")
    if valid.any():
        loss = (loss * valid).sum() / valid.sum()
    else:
        loss = loss.sum() * 0.0
    return loss


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(masked_loss, backend="eager")
    logits = torch.randn(4, 8, requires_grad=True)
    labels = torch.randint(0, 8, (4,))
    labels[0] = -100
    for lab in (labels, torch.full((4,), -100)):
        loss = f(logits, lab)
        loss.backward()
        print(loss.detach(), logits.grad.sum())
        logits.grad = None
