import torch


def add_padding_bias(scores, attention_mask):
    if (attention_mask == 0).any():
        bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        scores = scores + bias
    return scores


class SelfAttention(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)

    def forward(self, x, attention_mask=None):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-1, -2))[:, None] / q.shape[-1] ** 0.5
        if attention_mask is not None and not attention_mask.all():
            extended = attention_mask[:, None, None, :].to(scores.dtype)
            extended = (1.0 - extended) * torch.finfo(scores.dtype).min
            scores = scores + extended
        if attention_mask is not None:
            scores = add_padding_bias(scores, attention_mask)
        return (scores.softmax(-1) @ v[:, None]).squeeze(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    m = torch.compile(SelfAttention(8), backend="eager")
    x = torch.randn(2, 4, 8)
    with torch.no_grad():
        print(m(x, torch.ones(2, 4, dtype=torch.long)).sum())
        print(m(x, torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])).sum())
        print(m(x).sum())
