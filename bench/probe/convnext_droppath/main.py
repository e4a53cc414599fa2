import time
import torch
import torch.nn as nn
import torch.nn.functional as F
from layers import DropPath, LayerNorm2d


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim, drop_path=0.0, ls_init_value=1e-6):
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(ls_init_value * torch.ones(dim)) if ls_init_value > 0 else None
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.conv_dw(x).permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        if self.gamma is not None:
            x = x * self.gamma
        x = x.permute(0, 3, 1, 2)
        return shortcut + self.drop_path(x)


class ConvNeXt(nn.Module):
    def __init__(self, num_classes=10, depths=(2, 2), dims=(16, 32), drop_path_rate=0.2, ls_init_value=0.5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))
        dp_rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        self.stages = nn.ModuleList()
        cur, prev = 0, dims[0]
        for i, (d, dim) in enumerate(zip(depths, dims)):
            down = nn.Identity() if i == 0 else nn.Sequential(LayerNorm2d(prev, eps=1e-6), nn.Conv2d(prev, dim, 2, 2))
            blocks = [ConvNeXtBlock(dim, dp_rates[cur + j], ls_init_value) for j in range(d)]
            self.stages.append(nn.Sequential(down, *blocks))
            cur += d
            prev = dim
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)
        self.stats = {}

    def forward_features(self, x):
        x = self.stem(x)
        for i, stage in enumerate(self.stages):
            t0 = time.perf_counter()
            x = stage(x)
            self.stats[f"stage{i}_ms"] = (time.perf_counter() - t0) * 1000
        return x

    def forward(self, x, targets=None):
        x = self.forward_features(x)
        x = self.norm(x.mean([-2, -1]))
        logits = self.head(x)
        if targets is None:
            return logits
        loss = F.cross_entropy(logits, targets, label_smoothing=0.1)
        top5 = logits.topk(5, dim=-1).indices
        correct = [int(t) in row for t, row in zip(targets, top5.tolist())]
        self.stats["top5"] = sum(correct) / len(correct)
        return logits, loss


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = ConvNeXt().train()
    cmodel = torch.compile(model, backend="eager")
    digest = []
    for step in range(3):
        x = torch.randn(4, 3, 32, 32)
        y = torch.randint(0, 10, (4,))
        logits, loss = cmodel(x, y)
        digest += [round(loss.item(), 5), round(logits.sum().item(), 4), model.stats["top5"]]
    dropped = [sum(m.dropped) for m in model.modules() if isinstance(m, DropPath)]
    print("digest", digest, dropped)


if __name__ == "__main__":
    main()
