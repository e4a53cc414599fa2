import re

import torch

EOS = 1


def length_penalty(completion_ids, max_len):
    is_eos = completion_ids == EOS
    lengths = []
    for row in is_eos:
        idx = row.nonzero()
        lengths.append(idx[0].item() + 1 if len(idx) > 0 else max_len)
    return torch.tensor(lengths, dtype=torch.float)


def format_reward(texts):
    pattern = r"^<think>.*?</think>"
    return [1.0 if re.match(pattern, t) else 0.0 for t in texts]
