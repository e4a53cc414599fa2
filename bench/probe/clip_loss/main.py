import logging
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from dist_utils import gather_features, log_metrics

logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")


class ClipLoss(nn.Module):
    def __init__(self, local_loss=False, cache_labels=True, world_size=1):
        super().__init__()
        self.local_loss = local_loss
        self.cache_labels = cache_labels
        self.world_size = world_size
        self.prev_num_logits = 0
        self.labels = {}

    def get_ground_truth(self, device, num_logits):
        if self.prev_num_logits != num_logits or device not in self.labels:
            labels = torch.arange(num_logits, device=device, dtype=torch.long)
            if self.cache_labels:
                self.labels[device] = labels
                self.prev_num_logits = num_logits
        else:
            labels = self.labels[device]
        return labels

    def forward(self, image_features, text_features, logit_scale):
        all_image, all_text = gather_features(image_features, text_features, self.world_size)
        logits_per_image = logit_scale * all_image @ all_text.T
        logits_per_text = logits_per_image.T
        labels = self.get_ground_truth(image_features.device, logits_per_image.shape[0])
        return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2


class TinyCLIP(nn.Module):
    def __init__(self, img_dim=48, txt_vocab=100, embed_dim=32, init_logit_scale=math.log(1 / 0.07), max_logit_scale=100.0):
        super().__init__()
        self.visual = nn.Sequential(nn.Linear(img_dim, 64), nn.GELU(), nn.Linear(64, embed_dim))
        self.token_embedding = nn.Embedding(txt_vocab, 64)
        self.text_proj = nn.Linear(64, embed_dim)
        self.logit_scale = nn.Parameter(torch.ones([]) * init_logit_scale)
        self.max_logit_scale = max_logit_scale
        self.loss = ClipLoss()
        self.step = 0

    def encode_text(self, text):
        x = self.token_embedding(text)
        eot = text.argmax(dim=-1)
        return self.text_proj(x[torch.arange(x.shape[0]), eot])

    def forward(self, image, text):
        img = F.normalize(self.visual(image), dim=-1)
        txt = F.normalize(self.encode_text(text), dim=-1)
        logit_scale = self.logit_scale.exp()
        if logit_scale > self.max_logit_scale:
            logit_scale = torch.clamp(logit_scale, max=self.max_logit_scale)
        loss = self.loss(img, txt, logit_scale)
        with torch.no_grad():
            acc_i2t = (img @ txt.T).argmax(-1).eq(torch.arange(len(img))).float().mean()
            temperature = 1.0 / logit_scale
            metrics = {
                "loss": loss.item(),
                "acc_i2t": acc_i2t.item(),
                "temperature": float(temperature),
                "log_scale": math.log(logit_scale),
                "feat_std": np.std(img.numpy()),
            }
        log_metrics(metrics, self.step)
        self.step += 1
        return loss, metrics


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyCLIP()
    cmodel = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    digest = []
    for step in range(3):
        image = torch.randn(8, 48)
        text = torch.randint(0, 100, (8, 6))
        loss, metrics = cmodel(image, text)
        opt.zero_grad()
        loss.backward()
        opt.step()
        digest.append(round(loss.item(), 5))
        digest.append(round(metrics["temperature"], 5))
    print("digest", digest)


if __name__ == "__main__":
    main()
