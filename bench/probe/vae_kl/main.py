import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from annealing import KLAnnealer, check_posterior_collapse


class VAE(nn.Module):
    def __init__(self, x_dim=64, h_dim=48, z_dim=8, free_bits=0.05):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(x_dim, h_dim), nn.ReLU())
        self.fc_mu = nn.Linear(h_dim, z_dim)
        self.fc_logvar = nn.Linear(h_dim, z_dim)
        self.dec = nn.Sequential(nn.Linear(z_dim, h_dim), nn.ReLU(), nn.Linear(h_dim, x_dim))
        self.free_bits = free_bits
        self.history = []

    def reparameterize(self, mu, logvar, eps):
        std = torch.exp(0.5 * logvar)
        return mu + eps * std

    def forward(self, x, eps, beta):
        h = self.enc(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        logvar = logvar.clamp(-10, 10)
        z = self.reparameterize(mu, logvar, eps)
        x_hat = self.dec(z)
        recon = F.binary_cross_entropy_with_logits(x_hat, x, reduction="sum") / x.shape[0]
        kl_per_dim = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).mean(0)
        check_posterior_collapse(kl_per_dim)
        if self.free_bits > 0:
            kl = torch.stack([torch.clamp(k, min=self.free_bits) for k in kl_per_dim]).sum()
        else:
            kl = kl_per_dim.sum()
        loss = recon + beta * kl
        elbo = -(recon + kl)
        bits_per_dim = -elbo.item() / (x.shape[1] * math.log(2))
        self.history.append({"recon": recon.item(), "kl": kl.item(), "bpd": bits_per_dim})
        if kl < self.free_bits * kl_per_dim.numel():
            status = "collapsed"
        elif kl > 10.0:
            status = "high-kl"
        else:
            status = "ok"
        self.history[-1]["status"] = status
        if math.isnan(loss):
            raise RuntimeError("loss is NaN")
        return loss, x_hat


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = VAE()
    cmodel = torch.compile(model, backend="eager")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    annealer = KLAnnealer()
    digest = []
    for step in range(3):
        x = (torch.rand(16, 64) > 0.5).float()
        eps = torch.randn(16, 8)
        loss, _ = cmodel(x, eps, annealer.beta())
        opt.zero_grad()
        loss.backward()
        opt.step()
        annealer.advance()
        digest.append(round(loss.item(), 4))
    digest.append([(round(h["bpd"], 4), h["status"]) for h in model.history])
    print("digest", digest)


if __name__ == "__main__":
    main()
