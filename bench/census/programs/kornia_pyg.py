"""Census programs on kornia and torch_geometric (misc environment).

    python bench/census/programs/kornia_pyg.py NAME
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from census import Program, main


def img(b=2, ch=3, s=32):
    return torch.rand(b, ch, s, s)


# --- kornia --------------------------------------------------------------------------------
def kornia_aug_eval(c):
    import kornia.augmentation as K
    aug = K.AugmentationSequential(K.RandomHorizontalFlip(p=0.5), K.ColorJitter(0.2, 0.2, 0.2, 0.1, p=0.8),
                                   K.RandomAffine(degrees=15, p=0.7))
    c.call_fn(aug, (img(),))


def kornia_crop_eval(c):
    import kornia.augmentation as K
    c.call_fn(K.RandomResizedCrop((24, 24), p=1.0), (img(),))


def kornia_erasing_eval(c):
    import kornia.augmentation as K
    c.call_fn(K.RandomErasing(p=0.7), (img(),))


def kornia_mixup_eval(c):
    import kornia.augmentation as K
    c.call_fn(K.RandomMixUpV2(p=1.0), (img(), torch.tensor([0, 1])))


def kornia_gaussian_blur_eval(c):
    import kornia.filters as F
    c.call_fn(F.gaussian_blur2d, (img(), (5, 5), (1.5, 1.5)))


def kornia_canny_eval(c):
    import kornia.filters as F
    c.call_fn(F.canny, (img(),))


def kornia_warp_eval(c):
    import kornia.geometry as G
    H = torch.eye(3).repeat(2, 1, 1) + 0.01 * torch.randn(2, 3, 3)
    c.call_fn(G.warp_perspective, (img(), H, (32, 32)))


def kornia_rotate_eval(c):
    import kornia.geometry as G
    c.call_fn(G.rotate, (img(), torch.tensor([10.0, 30.0])))


def kornia_color_eval(c):
    import kornia.color as KC

    def f(x):
        return KC.rgb_to_lab(x), KC.rgb_to_hsv(x), KC.rgb_to_grayscale(x)
    c.call_fn(f, (img(),))


def kornia_harris_eval(c):
    import kornia.feature as KF
    c.call_fn(KF.harris_response, (torch.rand(2, 1, 32, 32),))


def kornia_morph_eval(c):
    import kornia.morphology as M
    c.call_fn(M.opening, (img(), torch.ones(3, 3)))


def kornia_equalize_eval(c):
    import kornia.enhance as E
    c.call_fn(E.equalize, (img(),))


def kornia_ssim_loss_train(c):
    import kornia.losses as L
    x = img().requires_grad_()
    y = img()
    cf = c.compile(L.ssim_loss)
    for i in range(2):
        loss = cf(x, y, 5)
        loss.backward()
        c.record(f"loss{i}", loss.detach())
    c.record("grad", x.grad)


def kornia_focal_loss_eval(c):
    import kornia.losses as L
    c.call_fn(L.focal_loss, (torch.randn(4, 5), torch.tensor([0, 1, 2, 4])), dict(alpha=0.5, reduction="mean"))


def kornia_pyramid_eval(c):
    import kornia.geometry as G
    c.call_fn(G.build_pyramid, (img(), 3))


def kornia_nms_eval(c):
    import kornia.geometry as G
    c.call_fn(G.nms2d, (torch.rand(2, 1, 16, 16), (3, 3)))


# --- torch_geometric -----------------------------------------------------------------------
def graph(n=12, e=40, f=8):
    x = torch.randn(n, f)
    ei = torch.randint(0, n, (2, e))
    return x, ei


def _gnn(c, conv_cls, **kw):
    x, ei = graph()
    m = conv_cls(8, 16, **kw)
    c.eval_calls(m, dict(x=x, edge_index=ei))


def pyg_gcn_eval(c):
    from torch_geometric.nn import GCNConv
    _gnn(c, GCNConv)


def pyg_gat_eval(c):
    from torch_geometric.nn import GATConv
    _gnn(c, GATConv, heads=2)


def pyg_gatv2_eval(c):
    from torch_geometric.nn import GATv2Conv
    _gnn(c, GATv2Conv, heads=2)


def pyg_sage_eval(c):
    from torch_geometric.nn import SAGEConv
    _gnn(c, SAGEConv)


def pyg_gin_eval(c):
    from torch_geometric.nn import GINConv
    x, ei = graph()
    m = GINConv(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16)))
    c.eval_calls(m, dict(x=x, edge_index=ei))


def pyg_transformer_conv_eval(c):
    from torch_geometric.nn import TransformerConv
    _gnn(c, TransformerConv, heads=2)


def pyg_cheb_eval(c):
    from torch_geometric.nn import ChebConv
    _gnn(c, ChebConv, K=3)


def pyg_graphsage_model_train(c):
    from torch_geometric.nn.models import GraphSAGE
    x, ei = graph()
    m = GraphSAGE(8, 16, num_layers=2, out_channels=3)
    c.train_steps(m, dict(x=x, edge_index=ei), loss_fn=lambda out: out.pow(2).mean())


def pyg_gcn_model_train(c):
    from torch_geometric.nn.models import GCN
    x, ei = graph()
    m = GCN(8, 16, num_layers=2, out_channels=3)
    c.train_steps(m, dict(x=x, edge_index=ei), loss_fn=lambda out: out.pow(2).mean())


def pyg_global_pool_eval(c):
    from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool
    x, _ = graph()
    batch = torch.tensor([0] * 5 + [1] * 7)

    def f(x, batch):
        return global_mean_pool(x, batch), global_max_pool(x, batch), global_add_pool(x, batch)
    c.call_fn(f, (x, batch))


def pyg_topk_pool_eval(c):
    from torch_geometric.nn import TopKPooling
    x, ei = graph()
    c.eval_calls(TopKPooling(8, ratio=0.5), dict(x=x, edge_index=ei))


def pyg_edgeconv_eval(c):
    from torch_geometric.nn import EdgeConv
    x, ei = graph()
    m = EdgeConv(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()))
    c.eval_calls(m, dict(x=x, edge_index=ei))


def pyg_gine_eval(c):
    from torch_geometric.nn import GINEConv
    x, ei = graph()
    m = GINEConv(torch.nn.Sequential(torch.nn.Linear(8, 16)), edge_dim=4)
    c.eval_calls(m, dict(x=x, edge_index=ei, edge_attr=torch.randn(ei.shape[1], 4)))


def pyg_dropedge_eval(c):
    from torch_geometric.utils import add_self_loops, dropout_edge, to_undirected
    x, ei = graph()

    def f(ei):
        ei = to_undirected(ei)
        ei, _ = add_self_loops(ei)
        return dropout_edge(ei, p=0.0, training=False)[0]
    c.call_fn(f, (ei,))


def kornia_aug_geometric_eval(c):
    import kornia.augmentation as K
    aug = K.AugmentationSequential(K.RandomPerspective(0.3, p=0.8), K.RandomRotation(20.0, p=0.7),
                                   K.RandomElasticTransform(p=0.5))
    c.call_fn(aug, (img(),))


def kornia_aug_intensity_eval(c):
    import kornia.augmentation as K
    aug = K.AugmentationSequential(K.RandomGaussianNoise(std=0.05, p=0.8), K.RandomGamma((0.8, 1.2), p=0.6),
                                   K.RandomPosterize(3, p=0.5), K.RandomSolarize(0.1, 0.1, p=0.5))
    c.call_fn(aug, (img(),))


def kornia_aug_blur_eval(c):
    import kornia.augmentation as K
    aug = K.AugmentationSequential(K.RandomMotionBlur(3, 35.0, 0.5, p=0.8), K.RandomBoxBlur((3, 3), p=0.5),
                                   K.RandomSharpness(0.5, p=0.5))
    c.call_fn(aug, (img(),))


def kornia_aug_mask_eval(c):
    import kornia.augmentation as K
    aug = K.AugmentationSequential(K.RandomAffine(10.0, p=1.0), K.RandomHorizontalFlip(p=0.5),
                                   data_keys=["input", "mask"])
    c.call_fn(aug, (img(), (torch.rand(2, 1, 32, 32) > 0.5).float()))


def kornia_cutmix_eval(c):
    import kornia.augmentation as K
    c.call_fn(K.RandomCutMixV2(p=1.0), (img(), torch.tensor([0, 1])))


def kornia_mosaic_eval(c):
    import kornia.augmentation as K
    c.call_fn(K.RandomMosaic((32, 32), p=1.0), (img(4),))


def kornia_thin_plate_eval(c):
    import kornia.augmentation as K
    c.call_fn(K.RandomThinPlateSpline(p=1.0), (img(),))


def kornia_clahe_eval(c):
    import kornia.enhance as E
    c.call_fn(E.equalize_clahe, (img(),), dict(clip_limit=2.0, grid_size=(2, 2)))


def kornia_connected_components_eval(c):
    from kornia.contrib import connected_components
    c.call_fn(connected_components, ((torch.rand(1, 1, 16, 16) > 0.5).float(),), dict(num_iterations=20))


def kornia_ransac_eval(c):
    from kornia.geometry import RANSAC
    pts1 = torch.rand(30, 2)
    H = torch.tensor([[1.0, 0.1, 0.05], [0.0, 1.1, 0.02], [0.0, 0.0, 1.0]])
    pts2 = (torch.cat([pts1, torch.ones(30, 1)], 1) @ H.T)[:, :2]
    c.call_fn(RANSAC("homography", max_iter=3, batch_size=16), (pts1, pts2))


def kornia_match_snn_eval(c):
    from kornia.feature import match_snn
    c.call_fn(match_snn, (torch.randn(20, 16), torch.randn(25, 16), 0.9))


def kornia_mean_iou_eval(c):
    from kornia.metrics import mean_iou
    c.call_fn(mean_iou, (torch.randint(0, 3, (2, 16, 16)), torch.randint(0, 3, (2, 16, 16)), 3))


def kornia_sift_eval(c):
    from kornia.feature import SIFTDescriptor
    c.eval_calls(SIFTDescriptor(16, 8, 4), dict(input=torch.rand(6, 1, 16, 16)))


def kornia_hausdorff_eval(c):
    from kornia.losses import HausdorffERLoss
    c.call_fn(HausdorffERLoss(), (torch.randn(2, 3, 16, 16), torch.randint(0, 3, (2, 1, 16, 16))))


def pyg_graph_conv_batched_train(c):
    from torch_geometric.nn import GraphConv, global_mean_pool
    x, ei = graph()
    batch = torch.tensor([0] * 5 + [1] * 7)
    conv = GraphConv(8, 16)
    head = torch.nn.Linear(16, 2)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = conv, head

        def forward(self, x, edge_index, batch):
            return self.head(global_mean_pool(self.conv(x, edge_index).relu(), batch))
    c.train_steps(Net(), dict(x=x, edge_index=ei, batch=batch), loss_fn=lambda out: out.pow(2).mean())


def pyg_sag_pool_eval(c):
    from torch_geometric.nn import SAGPooling
    x, ei = graph()
    c.eval_calls(SAGPooling(8, ratio=0.5), dict(x=x, edge_index=ei))


def pyg_appnp_eval(c):
    from torch_geometric.nn import APPNP
    x, ei = graph()
    c.eval_calls(APPNP(K=3, alpha=0.1), dict(x=x, edge_index=ei))


def pyg_pna_eval(c):
    from torch_geometric.nn import PNAConv
    x, ei = graph()
    deg = torch.tensor([0, 3, 5, 3, 1])
    m = PNAConv(8, 16, aggregators=["mean", "max", "std"], scalers=["identity", "amplification"], deg=deg)
    c.eval_calls(m, dict(x=x, edge_index=ei))


def pyg_to_dense_eval(c):
    from torch_geometric.utils import to_dense_adj, to_dense_batch
    x, ei = graph()
    batch = torch.tensor([0] * 5 + [1] * 7)

    def f(x, ei, batch):
        return to_dense_batch(x, batch), to_dense_adj(ei)
    c.call_fn(f, (x, ei, batch))


def pyg_softmax_scatter_eval(c):
    from torch_geometric.utils import scatter, softmax
    x, ei = graph()

    def f(x, ei):
        a = softmax(x[ei[0]].sum(-1), ei[1], num_nodes=x.shape[0])
        return scatter(x[ei[0]] * a[:, None], ei[1], dim=0, dim_size=x.shape[0], reduce="sum")
    c.call_fn(f, (x, ei))


PROGRAMS = {name: Program(fn) for name, fn in list(globals().items())
            if callable(fn) and getattr(fn, "__module__", None) == __name__ and name.endswith(("_train", "_eval"))}

if __name__ == "__main__":
    main(PROGRAMS)
