import torch


class Sampler:
    def __init__(self, n=10):
        self.sigmas = torch.linspace(10, 0.1, n)

    def step(self, x, i, eps):
        sigma = self.sigmas[i]
        sigma_next = self.sigmas[i + 1] if i + 1 < len(self.sigmas) else torch.tensor(0.0)
        dt = sigma_next - sigma
        if sigma_next == 0:
            return x - sigma * eps
        return x + eps * dt


if __name__ == "__main__":
    torch.manual_seed(0)
    s = Sampler()
    f = torch.compile(s.step, backend="eager")
    x = torch.randn(4)
    for i in range(3):
        x = f(x, i, torch.randn(4))
    print(x)
