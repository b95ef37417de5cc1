#!/usr/bin/python3
"""A scheduler that generates text with speculative decoding through the distsample gateway.

The gateway runs the target model: `distsample serve --model ngram` (a trigram model of a text).
This script is the draft side: a bigram model of the same text, with the same tokens and ids
(words and punctuation marks numbered in order of first appearance, as sources/ngram_lm.cpp
does). Each step it drafts a few tokens per request greedily, sends one verify step for all
requests, and prints the tokens each request emitted and the running acceptance rate.

    PYTHONPATH=build/python:clients/python /usr/bin/python3 examples/speculative_scheduler.py \
        --address 127.0.0.1:7700 --steps 10
"""

import argparse
import collections
import string
import sys

from distsample_client import Client

_PUNCTUATION = set(string.punctuation.encode())


def tokenize(text):
    """Lower-cased runs of ASCII letters and digits, and single punctuation marks (C locale)."""
    words, word = [], bytearray()
    for c in text:
        if chr(c).isascii() and chr(c).isalnum():
            word.append(ord(chr(c).lower()))
            continue
        if word:
            words.append(word.decode())
            word = bytearray()
        if c in _PUNCTUATION:
            words.append(chr(c))
    if word:
        words.append(word.decode())
    return words


class BigramDraft:
    def __init__(self, corpus_path):
        with open(corpus_path, "rb") as f:
            words = tokenize(f.read())
        self.ids, self.words = {}, []
        for w in words:
            if w not in self.ids:
                self.ids[w] = len(self.words)
                self.words.append(w)
        self.corpus = [self.ids[w] for w in words]
        self.padded_vocab = (len(self.words) + 7) // 8 * 8
        followers = collections.defaultdict(collections.Counter)
        for a, b in zip(self.corpus, self.corpus[1:]):
            followers[a][b] += 1
        unigram = collections.Counter(self.corpus)
        self.fallback = min(unigram, key=lambda t: (-unigram[t], t))
        # Greedy draft: the most frequent follower, ties to the lowest id.
        self.best = {a: min(c, key=lambda t: (-c[t], t)) for a, c in followers.items()}

    def propose(self, last, count):
        out = []
        for _ in range(count):
            last = self.best.get(last, self.fallback)
            out.append(last)
        return out

    def prompt(self, index):
        """Two consecutive corpus tokens, spread over the text (as ngram_lm::prompt)."""
        at = 2 + (index * 7919) % (len(self.corpus) - 2)
        return self.corpus[at - 2:at]

    def text(self, tokens):
        return " ".join(self.words[t] if 0 <= t < len(self.words) else f"<{t}>" for t in tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default="127.0.0.1:7700", help="host:port or unix:/path of the gateway")
    parser.add_argument("--secret", default=None)
    parser.add_argument("--corpus", default="/usr/share/common-licenses/GPL-3", help="the text the server's model was trained on")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--drafts", type=int, default=3, help="draft tokens per request per step (N - 1)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    draft = BigramDraft(args.corpus)
    with Client(args.address, secret=args.secret) as gateway:
        stats = gateway.stats()
        if stats.vocab_size != draft.padded_vocab:
            sys.exit(f"error: the gateway's vocabulary has {stats.vocab_size} tokens, this draft's {draft.padded_vocab}: "
                     "serve with --model ngram on the same corpus")
        if args.drafts + 1 > stats.max_tokens_per_req or args.requests > stats.max_batch:
            sys.exit(f"error: the gateway allows N <= {stats.max_tokens_per_req} and {stats.max_batch} requests per step")

        prompts = [draft.prompt(i) for i in range(args.requests)]
        slots = [gateway.register(history=p, temperature=args.temperature, seed=args.seed + i, scheduler_request_id=i)
                 for i, p in enumerate(prompts)]
        texts = [list(p) for p in prompts]
        positions = [len(p) for p in prompts]
        print(f"gateway: TP={stats.tp} V={stats.vocab_size}; {args.requests} requests in slots {slots}, {args.drafts} drafts per step")

        first = gateway.sample(slots, positions)  # logits from the server's target model
        for b in range(args.requests):
            texts[b].append(first.predict[b])
            positions[b] += 1
        print("step  0 (sample): " + " | ".join(f"[{b}] {draft.text([first.predict[b]])}" for b in range(args.requests)))

        proposed = accepted = emitted = 0
        n = args.drafts + 1
        for step in range(1, args.steps + 1):
            chains = [[texts[b][-1]] + draft.propose(texts[b][-1], args.drafts) for b in range(args.requests)]
            reply = gateway.verify(slots, positions, chains)
            parts = []
            for b in range(args.requests):
                length = reply.accept_length[b]
                tokens = list(reply.predict[b * n:b * n + length])
                texts[b].extend(tokens)
                positions[b] += length
                proposed += args.drafts
                accepted += length - 1
                emitted += length
                parts.append(f"[{b}] {length} tokens: {draft.text(tokens)}")
            print(f"step {step:2} (verify): " + " | ".join(parts))

        rate = accepted / proposed if proposed else 0.0
        per_step = emitted / (args.steps * args.requests) if args.steps else 0.0
        print(f"acceptance rate: {accepted}/{proposed} drafts = {100 * rate:.1f}%; {per_step:.2f} tokens per request per step")
        for b in range(args.requests):
            print(f"request {b}: {draft.text(texts[b])}")
            gateway.release(slots[b])


if __name__ == "__main__":
    main()
