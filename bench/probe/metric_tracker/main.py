import torch
import torch.nn as nn
import torch.nn.functional as F

from meters import AverageMeter, StepTimer, accuracy

torch.set_num_threads(1)
torch.manual_seed(21)

NUM_CLASSES = 5
losses = AverageMeter("Loss", ":.4e")
top1 = AverageMeter("Acc@1", ":6.2f")
worst_classes = []


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES))

    def forward(self, x):
        return self.net(x)


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def evaluate_batch(images, target, threshold=1.5):
    timer = StepTimer()
    output = model(images)
    loss = F.cross_entropy(output, target, reduction="none")
    acc1, acc3 = accuracy(output, target, topk=(1, 3))
    losses.update(loss.mean().item(), images.size(0))
    top1.update(acc1[0], images.size(0))
    per_class = {c: loss[target == c].mean() for c in range(NUM_CLASSES)}
    per_class = {c: v for c, v in per_class.items() if not torch.isnan(v)}
    ranked = sorted(per_class.items(), key=lambda kv: kv[1], reverse=True)
    worst_classes.append(ranked[0][0])
    if any(v > threshold for v in per_class.values()):
        print(f"hard classes: {[c for c, v in ranked if v > threshold]}")
    if all(v < 0.1 for v in per_class.values()):
        print("all classes easy")
    if (n_wrong := (output.argmax(1) != target).sum()) > images.size(0) // 2:
        print(f"more than half wrong ({n_wrong})")
    _ = timer.elapsed_ms()
    return loss.mean(), acc3


step = torch.compile(evaluate_batch, backend="eager")
digest = []
for i in range(3):
    x = torch.randn(16, 16)
    y = torch.randint(0, NUM_CLASSES, (16,))
    loss, acc3 = step(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    digest += [round(loss.item(), 4), round(acc3.item(), 2)]
print(str(losses), str(top1), worst_classes)
print("digest", digest)
