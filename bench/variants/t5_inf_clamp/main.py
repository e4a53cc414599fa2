import torch


class T5Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ff = torch.nn.Linear(8, 8)

    def forward(self, hidden_states):
        hidden_states = self.ff(hidden_states)
        if hidden_states.dtype == torch.float16 or torch.isinf(hidden_states).any():
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return hidden_states


if __name__ == "__main__":
    torch.manual_seed(0)
    m = torch.compile(T5Layer(), backend="eager")
    print(m(torch.randn(2, 8)).sum(), m(torch.randn(2, 8) * 1e38).sum())
