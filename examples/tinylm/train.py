"""Train TinyLM for a few steps under torch.compile, then evaluate.

Run from the repository root:  python examples/tinylm/train.py
"""
import logging

import torch
import torch.nn.functional as F

from tinylm import TinyLM, TinyLMConfig
from tinylm.utils import make_batches

STEPS = 3
BATCH_SIZE = 4


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.manual_seed(0)

    config = TinyLMConfig()
    model = TinyLM(config)
    compiled = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    train_data = make_batches(STEPS, BATCH_SIZE, config.max_seq_len, config.vocab_size, seed=1234)
    eval_data = make_batches(1, BATCH_SIZE, config.max_seq_len, config.vocab_size, seed=4321)
    positions = torch.arange(config.max_seq_len).expand(BATCH_SIZE, -1)

    model.train()
    for step, (input_ids, targets, mask) in enumerate(train_data):
        logits = compiled(input_ids, attention_mask=mask, position_ids=positions, use_cache=False)
        loss = lm_loss(logits, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")

    # Evaluate with grad mode left on: entering torch.no_grad() would change a
    # guard of every compiled graph and recompile the whole model, which costs
    # far more than the eval itself at this size. Detach so no graph is kept.
    model.eval()
    input_ids, targets, mask = eval_data[0]
    logits = compiled(input_ids, attention_mask=mask, position_ids=positions, use_cache=False).detach()
    eval_loss = lm_loss(logits, targets)
    accuracy = (logits.argmax(-1) == targets)[targets != -100].float().mean()
    print(f"eval loss {eval_loss.item():.4f} acc {accuracy.item():.4f}")
    logging.getLogger("train").info("trained %d steps", STEPS)


if __name__ == "__main__":
    main()
