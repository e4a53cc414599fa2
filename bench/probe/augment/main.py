import torch

from transforms import RandomResizedCropFlip, color_jitter, mixup, seed_everything

torch.set_num_threads(1)
seed_everything(5)

crop = RandomResizedCropFlip(8)


def gpu_augment(batch, labels, step, num_classes=10, mixup_alpha=0.4, mixup_prob=0.5):
    seed_everything(1000 + step)
    out = torch.stack([crop(img) for img in batch])
    out = color_jitter(out)
    mean = out.mean(dim=(0, 2, 3), keepdim=True)
    std = out.std(dim=(0, 2, 3), keepdim=True)
    out = (out - mean) / std
    if mixup_alpha > 0 and torch.rand(()).item() < mixup_prob:
        lam = torch.distributions.Beta(mixup_alpha, mixup_alpha).sample().item()
        out, targets = mixup(out, labels, mixup_alpha, num_classes, lam)
    else:
        targets = torch.nn.functional.one_hot(labels, num_classes).float()
    assert out.isfinite().all(), "augmentation produced non-finite values"
    return out, targets


aug = torch.compile(gpu_augment, backend="eager")
digest = []
for step in range(3):
    batch = torch.rand(4, 3, 12, 12)
    labels = torch.randint(0, 10, (4,))
    x, t = aug(batch, labels, step)
    digest += [round(x.abs().sum().item(), 4), round(t.sum(0).max().item(), 4)]
print("digest", digest)
