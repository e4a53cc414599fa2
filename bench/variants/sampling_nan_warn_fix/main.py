import warnings

import torch


def sample(logits, temperature):
    if temperature < 1e-5:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, -1)
    if torch.isnan(probs).any():
        warnings.warn("NaN in sampling probabilities; falling back to uniform")
        probs = torch.nan_to_num(probs, nan=1.0 / probs.size(-1))
    return torch.multinomial(probs, 1).squeeze(-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(sample, backend="eager")
    print(f(torch.randn(3, 6), 0.7), f(torch.randn(3, 6), 1.0))
