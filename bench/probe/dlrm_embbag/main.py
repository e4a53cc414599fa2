import itertools
import logging
import torch
import torch.nn as nn
from features import to_offsets, hash_ids, validate_jagged

logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(message)s")
log = logging.getLogger("dlrm")


class DLRM(nn.Module):
    def __init__(self, dense_dim=8, table_sizes=(50, 80, 30), emb_dim=16, top_hidden=32):
        super().__init__()
        self.table_sizes = table_sizes
        self.bot = nn.Sequential(nn.Linear(dense_dim, 32), nn.ReLU(), nn.Linear(32, emb_dim), nn.ReLU())
        self.embs = nn.ModuleList([nn.EmbeddingBag(n, emb_dim, mode="sum") for n in table_sizes])
        n_f = len(table_sizes) + 1
        n_int = n_f * (n_f - 1) // 2
        self.top = nn.Sequential(nn.Linear(emb_dim + n_int, top_hidden), nn.ReLU(), nn.Linear(top_hidden, 1))
        self.check_inputs = False
        self.pairs = list(itertools.combinations(range(n_f), 2))

    def interact(self, feats):
        T = torch.stack(feats, dim=1)
        Z = torch.bmm(T, T.transpose(1, 2))
        li = [i for i, j in self.pairs]
        lj = [j for i, j in self.pairs]
        return Z[:, li, lj]

    def forward(self, dense, sparse, labels=None):
        x = self.bot(dense)
        embs = []
        for k, (values, lengths) in enumerate(sparse):
            offsets = to_offsets(lengths)
            if self.check_inputs:
                validate_jagged(values, offsets, f"cat_{k}")
            ids = hash_ids(values, self.table_sizes[k])
            embs.append(self.embs[k](ids, offsets))
        all_lengths = torch.stack([lengths for _, lengths in sparse])
        if (n_empty := int((all_lengths == 0).sum())) > 0:
            log.debug("%d empty bags in batch", n_empty)
        z = torch.cat([x, self.interact([x] + embs)], dim=1)
        logits = self.top(z).squeeze(-1)
        if labels is None:
            return torch.sigmoid(logits)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        pos_rate = labels.mean()
        if pos_rate == 0 or pos_rate == 1:
            log.warning("batch has a single class; AUC undefined")
        return loss, torch.sigmoid(logits)


def make_batch(B, n_tables=3):
    dense = torch.randn(B, 8)
    sparse = []
    for _ in range(n_tables):
        lengths = torch.randint(0, 4, (B,))
        values = torch.randint(0, 10_000, (int(lengths.sum()),))
        sparse.append((values, lengths))
    labels = (torch.rand(B) > 0.7).float()
    return dense, sparse, labels


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DLRM()
    cmodel = torch.compile(model, backend="eager")
    digest = []
    with torch.no_grad():
        for step in range(3):
            dense, sparse, labels = make_batch(6)
            loss, p = cmodel(dense, sparse, labels)
            digest += [round(loss.item(), 5), round(p.sum().item(), 5)]
    print("digest", digest)


if __name__ == "__main__":
    main()
