"""A residual MLP (a ranking / policy head) whose layers log on every call.

The `logger.debug` in `ResidualLayer.forward` is the kind of trace line left in model code:
with logging at INFO it emits nothing, but Dynamo cannot trace a Logger method, so every
layer's forward is cut in two (GB0291) and the record is "emitted" eagerly between graphs.

    python mlp_logging.py            # a few inference steps, prints a checksum per step
"""
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger("mlp_logging")

# Small-batch inference sizes (a real-time policy / ranking call): per-call work is
# tens of microseconds of matmuls, so what happens between the kernels shows in the latency.
BATCH = 8
FEATURES = 32
DIM = 128
LAYERS = 6
OUTPUTS = 8


class ResidualLayer(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logger.debug("residual layer forward")
        return x + F.gelu(self.fc(self.norm(x)))


class MLP(nn.Module):
    def __init__(self, features: int, dim: int, layers: int, outputs: int):
        super().__init__()
        self.inp = nn.Linear(features, dim)
        self.layers = nn.ModuleList(ResidualLayer(dim) for _ in range(layers))
        self.head = nn.Linear(dim, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build(device: str = "cpu", mode: str = "default"):
    """The compiled model and one batch: `step(*inputs)` is one inference call."""
    torch.manual_seed(0)
    model = MLP(FEATURES, DIM, LAYERS, OUTPUTS).to(device).eval()
    step = torch.compile(model, mode=None if mode == "default" else mode)
    inputs = (torch.randn(BATCH, FEATURES, device=device),)
    return step, inputs


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    step, (x,) = build()
    with torch.no_grad():
        for i in range(3):
            out = step(x + i)
            print(f"step {i} out {out.sum().item():.4f} max {out.abs().max().item():.4f}")


if __name__ == "__main__":
    main()
