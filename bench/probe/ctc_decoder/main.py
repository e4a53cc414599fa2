import torch
import torch.nn as nn
import torch.nn.functional as F
from text import VOCAB, greedy_decode, edit_distance


class ConvSubsampler(nn.Module):
    def __init__(self, n_mels=20, d=48):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(n_mels, d, 3, 2, 1), nn.ReLU(), nn.Conv1d(d, d, 3, 2, 1), nn.ReLU())

    def forward(self, x, lengths):
        x = self.conv(x.transpose(1, 2)).transpose(1, 2)
        for _ in range(2):
            lengths = (lengths + 1) // 2
        return x, lengths


class CTCModel(nn.Module):
    def __init__(self, n_mels=20, d=48, vocab=len(VOCAB)):
        super().__init__()
        self.sub = ConvSubsampler(n_mels, d)
        self.rnn = nn.LSTM(d, d, num_layers=1, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * d, vocab)
        self.blank = 0

    def forward(self, feats, feat_lengths, targets=None, target_lengths=None):
        x, lengths = self.sub(feats, feat_lengths)
        max_len = lengths.max().item()
        x = x[:, :max_len]
        x, _ = self.rnn(x)
        log_probs = F.log_softmax(self.out(x), dim=-1)
        result = {"log_probs": log_probs, "lengths": lengths}
        if targets is not None:
            assert (target_lengths <= lengths).all(), "targets longer than encoder output"
            loss = F.ctc_loss(log_probs.transpose(0, 1), targets, lengths, target_lengths,
                              blank=self.blank, reduction="mean", zero_infinity=True)
            result["loss"] = loss
            hyps = greedy_decode(log_probs, lengths, self.blank)
            refs = ["".join(VOCAB[t] for t in tgt[:n].tolist()) for tgt, n in zip(targets, target_lengths)]
            errs = sum(edit_distance(h, r) for h, r in zip(hyps, refs))
            result["cer"] = errs / max(1, sum(len(r) for r in refs))
        return result


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = CTCModel().eval()
    cmodel = torch.compile(model, backend="eager")
    digest = []
    with torch.no_grad():
        for step in range(3):
            feats = torch.randn(2, 40, 20)
            feat_lengths = torch.tensor([40, 32 - 4 * step])
            targets = torch.randint(1, len(VOCAB), (2, 5))
            target_lengths = torch.tensor([5, 4])
            out = cmodel(feats, feat_lengths, targets, target_lengths)
            digest += [round(out["loss"].item(), 4), round(out["cer"], 4)]
    print("digest", digest)


if __name__ == "__main__":
    main()
