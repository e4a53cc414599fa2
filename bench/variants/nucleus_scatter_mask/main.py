import torch


def nucleus(logits, top_p=0.9):
    sorted_logits, sorted_idx = torch.sort(logits, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    remove = cum > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    if remove.any():
        logits = logits.masked_fill(remove.scatter(-1, sorted_idx, remove), float("-inf"))
    return logits


if __name__ == "__main__":
    torch.manual_seed(0)
    f = torch.compile(nucleus, backend="eager")
    print(f(torch.randn(2, 10)))
