"""The example's model, shared by the workers (torch_worker.py), the scheduler's draft
(scheduler.py) and the test that checks the outputs: a fixed-seed bigram language model, an
embedding table [V, D] and an LM head [D, V], so the logits after token t are embedding[t] @ lm_head.

Every weight is a small integer (the LM head's scaled by a power of two), so every partial sum of
the projection is exactly representable in fp32: numpy, torch on the CPU and torch on CUDA (TF32
included: the inputs fit its 10-bit mantissa) give the same bits in whatever order they sum, and
a worker's columns of the LM head give exactly the columns of the full rows."""

import numpy as np

LOGIT_SCALE = 0.5  # a power of two keeps the scaling exact; 0.5 makes rows peaked but not one-hot


class TinyLM:
    def __init__(self, vocab_size, dim=32, seed=1):
        rng = np.random.default_rng(seed)
        self.vocab_size, self.dim, self.seed = vocab_size, dim, seed
        self.embedding = rng.integers(-2, 3, (vocab_size, dim)).astype(np.float32)
        self.lm_head = (rng.integers(-2, 3, (dim, vocab_size)) * LOGIT_SCALE).astype(np.float32)

    def head_columns(self, begin, end):
        """The LM head's columns [begin, end): what one tensor-parallel worker holds."""
        return np.ascontiguousarray(self.lm_head[:, begin:end])

    def rows(self, tokens):
        """The full logits rows [len(tokens), V] after each of `tokens` (what one process would compute)."""
        return self.embedding[np.asarray(tokens, np.int64)] @ self.lm_head


class BigramDraft:
    """A draft model: the greedy next token of a noisy copy of the model's LM head, so it agrees
    with the target often but not always (a draft equal to the target would accept everything)."""

    def __init__(self, model, noise=0.1, seed=99):
        noise_rng = np.random.default_rng(seed)
        self.model = model
        self.noisy_head = model.lm_head + noise_rng.normal(0.0, noise, model.lm_head.shape).astype(np.float32)
        self.best = {}

    def propose(self, last, count):
        out = []
        for _ in range(count):
            if last not in self.best:
                self.best[last] = int(np.argmax(self.model.embedding[last] @ self.noisy_head))
            last = self.best[last]
            out.append(last)
        return out
