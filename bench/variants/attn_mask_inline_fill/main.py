import torch


class Attn(torch.nn.Module):
    def forward(self, scores, attention_mask):
        if (attention_mask == 0).any():
            scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        return scores.softmax(-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    m = torch.compile(Attn(), backend="eager")
    s = torch.randn(2, 2, 4, 4)
    print(m(s, torch.ones(2, 4, dtype=torch.long)).sum())
    print(m(s, torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])).sum())
