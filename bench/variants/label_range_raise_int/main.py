import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, labels=None):
        logits = self.lin(x)
        loss = None
        if labels is not None:
            if labels.max() >= logits.size(-1):
                raise ValueError(f"label {int(labels.max())} out of range for {logits.size(-1)} classes")
            loss = torch.nn.functional.cross_entropy(logits, labels)
        return logits, loss


if __name__ == "__main__":
    torch.manual_seed(0)
    h = torch.compile(Head(), backend="eager")
    print(h(torch.randn(6, 4), torch.randint(0, 3, (6,))))
