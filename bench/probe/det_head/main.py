import torch
import torch.nn as nn
import torch.nn.functional as F
from box_ops import decode_boxes, clip_boxes_to_image, box_area, validate_boxes


def make_anchors(feat_size, stride, sizes=(8.0, 16.0)):
    ys, xs = torch.meshgrid(torch.arange(feat_size), torch.arange(feat_size), indexing="ij")
    ctr = torch.stack([xs, ys], -1).reshape(-1, 2).float() * stride + stride / 2
    anchors = []
    for s in sizes:
        anchors.append(torch.cat([ctr - s / 2, ctr + s / 2], dim=1))
    return torch.stack(anchors, 1).reshape(-1, 4)


class RetinaStyleHead(nn.Module):
    def __init__(self, in_ch=16, num_anchors=2, num_classes=5):
        super().__init__()
        self.num_classes = num_classes
        self.backbone = nn.Sequential(nn.Conv2d(3, in_ch, 3, 2, 1), nn.ReLU(), nn.Conv2d(in_ch, in_ch, 3, 2, 1), nn.ReLU())
        self.cls_logits = nn.Conv2d(in_ch, num_anchors * num_classes, 3, padding=1)
        self.bbox_reg = nn.Conv2d(in_ch, num_anchors * 4, 3, padding=1)
        self.score_thresh = 0.55
        self.topk_candidates = 20
        self.detections_per_img = 5
        self.min_size = 1e-2

    def postprocess(self, cls, reg, anchors, image_size):
        results = []
        for logits_i, reg_i in zip(cls, reg):
            scores = torch.sigmoid(logits_i).flatten()
            keep_idxs = scores > self.score_thresh
            scores = scores[keep_idxs]
            topk_idxs = torch.where(keep_idxs)[0]
            num_topk = min(self.topk_candidates, topk_idxs.size(0))
            scores, idxs = scores.topk(num_topk)
            topk_idxs = topk_idxs[idxs]
            anchor_idxs = torch.div(topk_idxs, self.num_classes, rounding_mode="floor")
            labels = topk_idxs % self.num_classes
            boxes = decode_boxes(reg_i[anchor_idxs], anchors[anchor_idxs])
            boxes = clip_boxes_to_image(boxes, image_size)
            keep = box_area(boxes) > self.min_size
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            dets = sorted(zip(scores.tolist(), labels.tolist(), boxes.tolist()), key=lambda d: -d[0])
            dets = dets[: self.detections_per_img]
            results.append(dets)
        return results

    def forward(self, images, targets=None):
        feats = self.backbone(images)
        n, _, h, w = feats.shape
        cls = self.cls_logits(feats).permute(0, 2, 3, 1).reshape(n, -1, self.num_classes)
        reg = self.bbox_reg(feats).permute(0, 2, 3, 1).reshape(n, -1, 4)
        anchors = make_anchors(h, images.shape[-1] // h)
        if targets is not None:
            for t in targets:
                validate_boxes(t["boxes"])
            # simple focal-ish loss on random matches
            gt = torch.zeros_like(cls)
            for i, t in enumerate(targets):
                gt[i, t["anchor_idx"], t["labels"]] = 1.0
            loss = F.binary_cross_entropy_with_logits(cls, gt, reduction="sum") / max(1, sum(len(t["labels"]) for t in targets))
            return {"loss_cls": loss}
        return self.postprocess(cls, reg, anchors, images.shape[-2:])


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = RetinaStyleHead().eval()
    with torch.no_grad():
        model.cls_logits.bias.fill_(0.1)
    cmodel = torch.compile(model, backend="eager")
    digest = []
    for step in range(3):
        imgs = torch.randn(2, 3, 32, 32)
        if step == 1:
            targets = [{"boxes": torch.tensor([[1.0, 2.0, 10.0, 12.0]]), "labels": torch.tensor([2]), "anchor_idx": torch.tensor([5])}
                       for _ in range(2)]
            out = cmodel(imgs, targets)
            digest.append(round(out["loss_cls"].item(), 4))
        else:
            with torch.no_grad():
                dets = cmodel(imgs)
            digest.append([[(round(s, 4), l) for s, l, _ in d] for d in dets])
    print("digest", digest)


if __name__ == "__main__":
    main()
