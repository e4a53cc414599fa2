import torch


def dynamic_threshold(x0, ratio=0.995):
    s = torch.quantile(x0.abs().reshape(x0.shape[0], -1), ratio, dim=1)
    s = max(s.max().item(), 1.0)
    return x0.clamp(-s, s) / s


def masked_mean(x, mask):
    return (x * mask).sum(0) / max(int(mask.long().sum()), 1)


class GradScale(torch.nn.Module):
    def forward(self, g):
        scale = min(g.norm().item() * 0.5, 1.0)
        return g * scale


if __name__ == "__main__":
    torch.manual_seed(0)
    thr = torch.compile(dynamic_threshold, backend="eager")
    mean = torch.compile(masked_mean, backend="eager")
    gs = torch.compile(GradScale(), backend="eager")
    for step in range(3):
        x0 = torch.randn(2, 3, 4, 4) * (step + 0.5)
        print(thr(x0).sum())
        x = torch.randn(5, 3)
        print(mean(x, (torch.rand(5, 1) > 0.5 * step).float()))
        print(gs(torch.randn(6) * step))
