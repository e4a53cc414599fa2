import torch
import torch.nn as nn
import torch.nn.functional as F

from schedule import cosine_beta_schedule, deprecate, extract, to_numpy_sigma

torch.set_num_threads(1)
torch.manual_seed(0)


class TinyUNet(nn.Module):
    def __init__(self, ch=8, T=20):
        super().__init__()
        self.time_emb = nn.Embedding(T, ch)
        self.conv1 = nn.Conv2d(3, ch, 3, padding=1)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1)
        self.out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x, t):
        h = F.silu(self.conv1(x))
        h = h + self.time_emb(t)[:, :, None, None]
        h = F.silu(self.conv2(h))
        return self.out(h)


class GaussianDiffusion(nn.Module):
    def __init__(self, model, timesteps=20, clip_denoised=True):
        super().__init__()
        self.model = model
        self.num_timesteps = timesteps
        self.clip_denoised = clip_denoised
        betas = cosine_beta_schedule(timesteps).float()
        alphas = 1.0 - betas
        alphas_cumprod = torch.cumprod(alphas, dim=0)
        alphas_cumprod_prev = F.pad(alphas_cumprod[:-1], (1, 0), value=1.0)
        self.register_buffer("betas", betas)
        self.register_buffer("alphas_cumprod", alphas_cumprod)
        self.register_buffer("sqrt_recip_alphas_cumprod", torch.sqrt(1.0 / alphas_cumprod))
        self.register_buffer("sqrt_recipm1_alphas_cumprod", torch.sqrt(1.0 / alphas_cumprod - 1))
        posterior_variance = betas * (1.0 - alphas_cumprod_prev) / (1.0 - alphas_cumprod)
        self.register_buffer("posterior_log_variance_clipped", torch.log(posterior_variance.clamp(min=1e-20)))
        self.register_buffer("posterior_mean_coef1", betas * torch.sqrt(alphas_cumprod_prev) / (1.0 - alphas_cumprod))
        self.register_buffer("posterior_mean_coef2", (1.0 - alphas_cumprod_prev) * torch.sqrt(alphas) / (1.0 - alphas_cumprod))

    def p_sample(self, x, t, noise):
        b = x.shape[0]
        batched_times = torch.full((b,), t, dtype=torch.long)
        eps = self.model(x, batched_times)
        x_start = extract(self.sqrt_recip_alphas_cumprod, batched_times, x.shape) * x - \
            extract(self.sqrt_recipm1_alphas_cumprod, batched_times, x.shape) * eps
        if self.clip_denoised:
            x_start.clamp_(-1.0, 1.0)
        mean = extract(self.posterior_mean_coef1, batched_times, x.shape) * x_start + \
            extract(self.posterior_mean_coef2, batched_times, x.shape) * x
        log_var = extract(self.posterior_log_variance_clipped, batched_times, x.shape)
        noise = noise if t > 0 else 0.0
        return mean + (0.5 * log_var).exp() * noise

    def sample(self, img, noises, return_all_timesteps=False, eta=None):
        if eta is not None:
            deprecate("eta", "1.0", "DDPM sampling ignores eta.")
        imgs = [img]
        for t in reversed(range(0, self.num_timesteps)):
            img = self.p_sample(img, t, noises[t])
            if torch.isnan(img).any():
                raise FloatingPointError(f"NaN at step {t}")
            imgs.append(img)
        sigma_T = to_numpy_sigma(self.alphas_cumprod[-1])
        print(f"sampling done, sigma_T={float(sigma_T):.3f}, final std {img.std():.4f}")
        ret = img if not return_all_timesteps else torch.stack(imgs, dim=1)
        return ret


unet = TinyUNet()
diffusion = GaussianDiffusion(unet).eval()
sample = torch.compile(diffusion.sample, backend="eager")
digest = []
with torch.no_grad():
    for i in range(2):
        img = torch.randn(2, 3, 8, 8)
        noises = torch.randn(20, 2, 3, 8, 8)
        out = sample(img, noises, eta=0.0 if i == 0 else None)
        digest.append(round(out.sum().item(), 4))
print("digest", digest)
