import logging
import torch

log = logging.getLogger("open_clip")


def gather_features(image_features, text_features, world_size=1):
    if world_size == 1:
        return image_features, text_features
    raise NotImplementedError


def log_metrics(metrics, step):
    parts = [f"{k}: {v:.4f}" for k, v in metrics.items()]
    log.info(f"step {step} | " + " | ".join(parts))
