import math
import warnings
import torch
import torch.nn as nn
import torch.nn.functional as F
from schedule import betas_for_alpha_bar, timestep_embedding, dynamic_threshold


class ResBlock(nn.Module):
    def __init__(self, ch, emb_ch):
        super().__init__()
        self.in_layers = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, ch, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_ch, ch))
        self.out_layers = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, ch, 3, padding=1))

    def forward(self, x, emb):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb)[:, :, None, None]
        return x + self.out_layers(h)


class TinyUNet(nn.Module):
    def __init__(self, ch=16, num_classes=10):
        super().__init__()
        self.ch = ch
        self.time_embed = nn.Sequential(nn.Linear(ch, 4 * ch), nn.SiLU(), nn.Linear(4 * ch, 4 * ch))
        self.label_emb = nn.Embedding(num_classes + 1, 4 * ch)  # last index = null class
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.down = ResBlock(ch, 4 * ch)
        self.pool = nn.AvgPool2d(2)
        self.mid = ResBlock(ch, 4 * ch)
        self.up = ResBlock(ch, 4 * ch)
        self.out = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

    def forward(self, x, timesteps, y=None):
        emb = self.time_embed(timestep_embedding(timesteps, self.ch))
        if y is not None:
            emb = emb + self.label_emb(y)
        h = self.down(self.inp(x), emb)
        m = self.mid(self.pool(h), emb)
        h = self.up(h + F.interpolate(m, scale_factor=2, mode="nearest"), emb)
        return self.out(h)


class DDIMSampler:
    def __init__(self, model, num_train_timesteps=100, null_class=10):
        self.model = model
        self.betas = betas_for_alpha_bar(num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)
        self.num_train_timesteps = num_train_timesteps
        self.null_class = null_class

    def guided_eps(self, x, t, y, guidance_scale):
        x_in = torch.cat([x, x])
        t_in = torch.cat([t, t])
        y_in = torch.cat([y, torch.full_like(y, self.null_class)])
        eps_cond, eps_uncond = self.model(x_in, t_in, y_in).chunk(2)
        return eps_uncond + guidance_scale * (eps_cond - eps_uncond)

    def step(self, x, t, t_prev, y, guidance_scale=3.0, eta=0.0, thresholding=True):
        ts = torch.full((x.shape[0],), t, dtype=torch.long)
        eps = self.guided_eps(x, ts, y, guidance_scale)
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[t_prev] if t_prev >= 0 else torch.tensor(1.0)
        x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
        if thresholding:
            x0 = dynamic_threshold(x0)
        else:
            x0 = x0.clamp(-1, 1)
        sigma = eta * torch.sqrt((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev))
        dir_xt = torch.sqrt(1 - a_prev - sigma ** 2) * eps
        x_prev = a_prev.sqrt() * x0 + dir_xt
        if torch.isnan(x_prev).any():
            warnings.warn(f"NaN in sample at t={t}")
        return x_prev

    @torch.no_grad()
    def sample(self, shape, y, steps=5, guidance_scale=3.0, generator=None):
        x = torch.randn(shape, generator=generator)
        ts = list(range(0, self.num_train_timesteps, self.num_train_timesteps // steps))[::-1]
        for i, t in enumerate(ts):
            t_prev = ts[i + 1] if i + 1 < len(ts) else -1
            x = self.step(x, t, t_prev, y, guidance_scale)
        return x


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyUNet().eval()
    sampler = DDIMSampler(model)
    sampler.step = torch.compile(sampler.step, backend="eager")
    digest = []
    for r in range(2):
        g = torch.Generator().manual_seed(r)
        y = torch.tensor([1, 7])
        x = sampler.sample((2, 3, 8, 8), y, steps=4, generator=g)
        digest.append(round(x.sum().item(), 4))
    print("digest", digest)


if __name__ == "__main__":
    main()
