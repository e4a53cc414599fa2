"""An observation encoder that normalises its input by the batch's largest magnitude.

`obs.abs().max().item()` reads the scale into Python on every call (GB0124), only to
divide tensors by it: the graph ends at the read and a second graph starts after it,
with the number as a new input. Each layer does the same with its activations
(dynamic per-tensor scaling, as in simulated 8-bit quantisation).

    python item_scale.py             # a few inference steps, prints a checksum per step
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

# Small-batch inference sizes (a real-time policy / ranking call): per-call work is
# tens of microseconds of matmuls, so what happens between the kernels shows in the latency.
BATCH = 8
FEATURES = 32
DIM = 128
LAYERS = 4
OUTPUTS = 8


class ScaledLinear(nn.Module):
    """A linear layer on activations scaled into [-1, 1] and rounded to 8 bits."""

    def __init__(self, dim: int):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().max().item()
        q = torch.round(x / scale * 127) / 127
        return x + F.relu(self.fc(q)) * scale


class Encoder(nn.Module):
    def __init__(self, features: int, dim: int, layers: int, outputs: int):
        super().__init__()
        self.inp = nn.Linear(features, dim)
        self.layers = nn.ModuleList(ScaledLinear(dim) for _ in range(layers))
        self.head = nn.Linear(dim, outputs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        scale = obs.abs().max().item()
        x = self.inp(obs / (scale + 1e-6))
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build(device: str = "cpu", mode: str = "default"):
    """The compiled model and one batch: `step(*inputs)` is one inference call."""
    torch.manual_seed(0)
    model = Encoder(FEATURES, DIM, LAYERS, OUTPUTS).to(device).eval()
    step = torch.compile(model, mode=None if mode == "default" else mode)
    inputs = (torch.randn(BATCH, FEATURES, device=device) * 5,)
    return step, inputs


def main() -> None:
    step, (obs,) = build()
    with torch.no_grad():
        for i in range(3):
            out = step(obs + i)
            print(f"step {i} out {out.sum().item():.4f} max {out.abs().max().item():.4f}")


if __name__ == "__main__":
    main()
