import random

import numpy as np
import torch


class RandomResizedCropFlip:
    def __init__(self, size, p_flip=0.5, scale=(0.5, 1.0)):
        self.size = size
        self.p_flip = p_flip
        self.scale = scale

    def __call__(self, img):
        _, H, W = img.shape
        area = H * W * torch.empty(1).uniform_(*self.scale).item()
        side = int(round(area ** 0.5))
        side = max(1, min(side, H, W))
        i = torch.randint(0, H - side + 1, size=(1,)).item()
        j = torch.randint(0, W - side + 1, size=(1,)).item()
        crop = img[:, i:i + side, j:j + side]
        crop = torch.nn.functional.interpolate(crop[None], size=(self.size, self.size), mode="bilinear", align_corners=False)[0]
        if torch.rand(1) < self.p_flip:
            crop = crop.flip(-1)
        return crop


def mixup(x, y, alpha, num_classes, lam):
    index = torch.randperm(x.size(0))
    mixed_x = lam * x + (1 - lam) * x[index, :]
    y1 = torch.nn.functional.one_hot(y, num_classes).float()
    return mixed_x, lam * y1 + (1 - lam) * y1[index]


def color_jitter(img, brightness=0.2):
    factor = float(np.random.uniform(1 - brightness, 1 + brightness))
    return (img * factor).clamp(0, 1)


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
