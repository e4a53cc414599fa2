import math

import torch

from model import GPT, GPTConfig
from utils import Timer, get_lr

torch.set_num_threads(1)
torch.manual_seed(1337)

config = GPTConfig()
model = GPT(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4)
timer = Timer()
grad_clip = 1.0
log_interval = 1
running_mfu = -1.0


def train_step(X, Y, it):
    lr = get_lr(it)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    logits, loss = model(X, Y)
    loss.backward()
    if grad_clip != 0.0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item()
    if it % log_interval == 0:
        print(f"iter {it}: loss {lossf:.4f}, lr {lr:.2e}, norm {norm:.3f}")
    if math.isnan(lossf):
        raise RuntimeError("loss is nan")
    return logits.detach(), lossf


compiled_step = torch.compile(train_step, backend="eager")

data = torch.randint(0, config.vocab_size, (4, config.block_size + 1))
digest = []
for it in range(2):
    X, Y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    logits, lossf = compiled_step(X, Y, it)
    digest.append(round(lossf, 4))
    digest.append(round(logits.sum().item(), 3))
model.eval()
gen = torch.compile(model.generate, backend="eager")
sample = gen(data[:2, :4], max_new_tokens=4, temperature=0.8, top_k=5)
digest.append(sample.tolist())
print("digest", digest)
