import logging
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from utils import deprecate, get_extended_attention_mask

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
logger = logging.getLogger("bert")


class BertConfig:
    vocab_size = 512
    hidden_size = 64
    num_attention_heads = 4
    num_hidden_layers = 2
    intermediate_size = 128
    max_position_embeddings = 64
    type_vocab_size = 2
    num_labels = 3
    hidden_dropout_prob = 0.0
    problem_type = None


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)))
        self.config = config

    def forward(self, input_ids, token_type_ids=None):
        assert input_ids.max() < self.config.vocab_size, "input_ids out of range"
        seq_length = input_ids.shape[1]
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        emb = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        emb = emb + self.position_embeddings(position_ids)
        return self.LayerNorm(emb)


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = F.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.shape[0], ctx.shape[1], -1)
        return (ctx, probs) if output_attentions else (ctx,)


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attn_out = nn.Linear(config.hidden_size, config.hidden_size)
        self.ln1 = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ln2 = nn.LayerNorm(config.hidden_size, eps=1e-12)

    def forward(self, hidden_states, attention_mask=None):
        attn = self.attention(hidden_states, attention_mask)[0]
        h = self.ln1(hidden_states + self.attn_out(attn))
        return self.ln2(h + self.output(F.gelu(self.intermediate(h))))


class BertForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, return_dict=None):
        if return_dict is not None:
            deprecate("return_dict", "5.0", "Outputs are always dicts now.")
        if attention_mask is not None and (attention_mask == 0).any():
            ext = get_extended_attention_mask(attention_mask, torch.float32)
        else:
            ext = None
        h = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            h = layer(h, ext)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            if self.config.problem_type is None:
                if self.config.num_labels == 1:
                    self.config.problem_type = "regression"
                elif labels.dtype == torch.long or labels.dtype == torch.int:
                    self.config.problem_type = "single_label_classification"
                else:
                    self.config.problem_type = "multi_label_classification"
            if self.config.problem_type == "single_label_classification":
                loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.view(-1))
            logger.info(f"batch loss {loss.item():.4f}")
        return {"loss": loss, "logits": logits}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = BertConfig()
    model = BertForSequenceClassification(config).eval()
    cmodel = torch.compile(model, backend="eager")
    digest = []
    for step in range(3):
        input_ids = torch.randint(0, config.vocab_size, (4, 16))
        mask = torch.ones(4, 16, dtype=torch.long)
        mask[:, 12 + step:] = 0
        labels = torch.randint(0, config.num_labels, (4,))
        with torch.no_grad():
            out = cmodel(input_ids, attention_mask=mask, labels=labels, return_dict=True)
        digest.append(round(out["loss"].item(), 5))
        digest.append(round(out["logits"].sum().item(), 5))
    print("digest", digest)


if __name__ == "__main__":
    main()
