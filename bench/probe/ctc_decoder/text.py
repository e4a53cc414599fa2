import torch

VOCAB = ["<blank>"] + list("abcdefghij ")


def greedy_decode(log_probs, lengths, blank=0):
    best = log_probs.argmax(-1)
    hyps = []
    for b in range(best.shape[0]):
        seq = best[b, : lengths[b]].tolist()
        out, prev = [], None
        for tok in seq:
            if tok != prev and tok != blank:
                out.append(tok)
            prev = tok
        hyps.append("".join(VOCAB[t] for t in out))
    return hyps


def edit_distance(a, b):
    d = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, cb in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (ca != cb))
    return d[-1]
