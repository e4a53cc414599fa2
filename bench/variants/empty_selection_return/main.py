"""Early returns when a data-dependent selection comes out empty, three spellings."""

import torch


def no_boxes(like):
    return like.new_zeros((0, 4)), like.new_zeros(0)


def postprocess(boxes, scores, threshold):
    keep = scores > threshold
    kept = boxes[keep]
    if kept.numel() == 0:
        return no_boxes(boxes)
    kept_scores = scores[keep]
    kept = kept.clamp(min=0)
    return kept, kept_scores


class TokenPool(torch.nn.Module):
    def forward(self, hidden, mask):
        picked = hidden[mask]
        if len(picked) == 0:
            return hidden.new_zeros(hidden.shape[-1])
        picked = picked * 2
        return picked.mean(0)


def matched_pairs(dm, th):
    vals, idx = torch.topk(dm, 2, dim=1, largest=False)
    ratio = vals[:, 0] / vals[:, 1]
    passed = ratio <= th
    good = ratio[passed]
    if good.shape[0] == 0:
        return torch.empty(0, 2, dtype=torch.long), torch.empty(0)
    rows = torch.arange(dm.shape[0])[passed]
    cols = idx[:, 0][passed]
    return torch.stack([rows, cols], 1), good


if __name__ == "__main__":
    torch.manual_seed(0)
    post = torch.compile(postprocess, backend="eager")
    pool = torch.compile(TokenPool(), backend="eager")
    match = torch.compile(matched_pairs, backend="eager")
    boxes, scores = torch.rand(6, 4) * 10 - 1, torch.rand(6)
    hidden = torch.randn(5, 3)
    dm = torch.rand(6, 7)
    with torch.no_grad():  # inference
        for t in (0.5, 2.0):
            print(post(boxes, scores, t))
            print(pool(hidden, torch.rand(5) > t - 0.4))
            print(match(dm, t - 0.5))
