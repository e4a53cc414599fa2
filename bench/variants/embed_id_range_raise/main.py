import torch


class Embed(torch.nn.Module):
    def __init__(self, vocab=20, dim=8):
        super().__init__()
        self.vocab = vocab
        self.emb = torch.nn.Embedding(vocab, dim)

    def forward(self, ids):
        if ids.max() >= self.vocab or ids.min() < 0:
            raise IndexError(f"token id out of range [0, {self.vocab})")
        return self.emb(ids)


if __name__ == "__main__":
    torch.manual_seed(0)
    m = torch.compile(Embed(), backend="eager")
    print(m(torch.tensor([[1, 2, 19]])).sum())
