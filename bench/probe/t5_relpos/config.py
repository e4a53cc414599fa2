import warnings


class T5Config:
    def __init__(self, d_model=32, num_heads=4, vocab_size=48, relative_attention_num_buckets=8,
                 relative_attention_max_distance=16, feed_forward_proj="relu", decoder_start_token_id=0,
                 eos_token_id=1, max_new_tokens=6):
        self.d_model = d_model
        self.num_heads = num_heads
        self.vocab_size = vocab_size
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.relative_attention_max_distance = relative_attention_max_distance
        self.feed_forward_proj = feed_forward_proj
        self.decoder_start_token_id = decoder_start_token_id
        self.eos_token_id = eos_token_id
        self.max_new_tokens = max_new_tokens


def warn_once(msg, _seen=set()):
    if msg not in _seen:
        _seen.add(msg)
        warnings.warn(msg, UserWarning)
