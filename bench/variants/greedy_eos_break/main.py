import torch


def greedy(step_fn, tokens, eos: int, max_new: int):
    for _ in range(max_new):
        nxt = step_fn(tokens)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if (nxt == eos).all():
            break
    return tokens


if __name__ == "__main__":
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 10)
    f = torch.compile(greedy, backend="eager")
    print(f(emb, torch.tensor([[1, 2], [3, 4]]), 7, 4))
