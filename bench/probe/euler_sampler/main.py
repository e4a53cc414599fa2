import torch
import torch.nn as nn

from kutils import get_ancestral_step, get_sigmas_karras, log_snr, to_d

torch.set_num_threads(1)
torch.manual_seed(1234)


class Denoiser(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 1, 64), nn.SiLU(), nn.Linear(64, dim))

    def forward(self, x, sigma):
        c_in = 1 / (sigma ** 2 + 1) ** 0.5
        s = sigma.expand(x.shape[0], 1)
        return x - sigma * self.net(torch.cat([x * c_in, s.log()], -1))


@torch.no_grad()
def sample_euler(model, x, sigmas, noises, s_churn=0.0, s_tmin=0.0, s_tmax=float("inf"), s_noise=1.0, callback=None):
    s_in = x.new_ones([x.shape[0]])
    for i in range(len(sigmas) - 1):
        gamma = min(s_churn / (len(sigmas) - 1), 2 ** 0.5 - 1) if s_tmin <= sigmas[i] <= s_tmax else 0.0
        sigma_hat = sigmas[i] * (gamma + 1)
        if gamma > 0:
            eps = noises[i] * s_noise
            x = x + eps * (sigma_hat ** 2 - sigmas[i] ** 2) ** 0.5
        denoised = model(x, sigma_hat * s_in[:, None])
        d = to_d(x, sigma_hat * s_in, denoised)
        if callback is not None:
            callback({"x": x, "i": i, "sigma": sigmas[i], "sigma_hat": sigma_hat, "denoised": denoised})
        dt = sigmas[i + 1] - sigma_hat
        x = x + d * dt
    return x


@torch.no_grad()
def sample_euler_ancestral(model, x, sigmas, noises, eta=1.0, s_noise=1.0):
    s_in = x.new_ones([x.shape[0]])
    snrs = []
    for i in range(len(sigmas) - 1):
        denoised = model(x, sigmas[i] * s_in[:, None])
        sigma_down, sigma_up = get_ancestral_step(sigmas[i], sigmas[i + 1], eta=eta)
        d = to_d(x, sigmas[i] * s_in, denoised)
        dt = sigma_down - sigmas[i]
        x = x + d * dt
        if sigmas[i + 1] > 0:
            x = x + noises[i] * s_noise * sigma_up
            snrs.append(log_snr(sigmas[i + 1]))
    return x, snrs


trace = []


def progress(info):
    trace.append(round(float(info["sigma"]), 4))


model = Denoiser().eval()
euler = torch.compile(sample_euler, backend="eager")
ancestral = torch.compile(sample_euler_ancestral, backend="eager")
sigmas = get_sigmas_karras(8, 0.03, 10.0)
digest = []
for k in range(2):
    x = torch.randn(4, 16) * sigmas[0]
    noises = torch.randn(8, 4, 16)
    out = euler(model, x, sigmas, noises, s_churn=1.0, callback=progress)
    out2, snrs = ancestral(model, x, sigmas, noises)
    digest += [round(out.sum().item(), 4), round(out2.sum().item(), 4), [round(s, 3) for s in snrs][:3]]
print("trace", trace[:8])
print("digest", digest)
