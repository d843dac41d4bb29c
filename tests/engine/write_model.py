#!/usr/bin/env python3
"""Writes a random-weight llama model as GGUF for llama.cpp's llama-server.

The weights are noise, so the text is noise, but to the engine it is a real model: real
matrix products per token, a real KV cache, real batching over its slots. Sized so one decode
step costs a few milliseconds on one core and the prefill of a 1,000-token prompt a few hundred.

Deterministic for a seed: the same file byte for byte, so `cargo xtask setup` can tell an up to
date model by its size and the tests' numbers do not move between machines.

Usage: write_model.py OUT.gguf [--seed N]
Needs numpy and llama.cpp's own gguf-py (PYTHONPATH=<llama.cpp>/gguf-py).
"""

import argparse
import string
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("write_model.py: no gguf module: PYTHONPATH=<llama.cpp source>/gguf-py")

# Hyperparameters: 6 layers of width 384 (about 11M parameters, 46 MB in F32).
N_EMBD = 384
N_LAYER = 6
N_HEAD = 6
N_HEAD_KV = 6
N_FF = 1024
N_CTX_TRAIN = 8192

# Pieces of the SentencePiece-style vocabulary after the specials and the 256 byte tokens:
# characters, "▁"-prefixed characters and words, so ordinary English splits into a few tokens
# per word, as it does with a real llama vocabulary; every word of inferscope's synthetic
# prompts (loadgen/dataset.rs) is one token, so a prompt of N words is about N tokens.
WORDS = """the of and to in is that for it as with was on be by this are at from or an
have not which but all they one can has more will their we about there when so what if up out
who them some time other into only its then two first would like these than over also new any
after our most made where many may such long way down should because each just those people how
too very well good much before great through back years where know take year your could work
part place same number little world even great under give most need house question system model
cache memory token queue latency request server engine batch slot prompt answer kernel network
gpu cpu thread socket stream vector index search rank embed tool call service pipeline
latency memory question explain summarise graph data load value error result compute layer json
ticket""".split()


def vocabulary():
    """Tokens, scores and types: <unk>, <s>, </s>, the 256 byte tokens, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores = [0.0, 0.0, 0.0]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)
    pieces = []
    for c in string.ascii_letters + string.digits + string.punctuation:
        pieces += [c, "\u2581" + c]
    seen = set()
    for w in WORDS:
        # SentencePiece merges adjacent pieces pairwise, so a word is reachable only through
        # its prefixes: "▁m", "▁mo", ..., "▁model".
        for word in (w, "\u2581" + w):
            for end in range(2, len(word) + 1):
                p = word[:end]
                if p not in seen:
                    seen.add(p)
                    pieces.append(p)
    pieces.append("\u2581")
    # Longer pieces score higher so the tokenizer prefers whole words.
    for p in pieces:
        if p in tokens:
            continue
        tokens.append(p)
        types.append(gguf.TokenType.NORMAL)
        scores.append(float(len(p)) - 10.0)
    return tokens, scores, types


CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("inferscope-random-llama")
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def tensor(name, *dims, scale=None):
        # numpy's shape is ggml's dims reversed: ggml [n_in, n_out] is numpy (n_out, n_in).
        shape = tuple(reversed(dims))
        s = scale if scale is not None else 1.0 / np.sqrt(dims[0])
        w.add_tensor(name, (rng.standard_normal(shape, dtype=np.float32) * s).astype(np.float32))

    def ones(name, n):
        w.add_tensor(name, np.ones((n,), dtype=np.float32))

    tensor("token_embd.weight", N_EMBD, n_vocab, scale=0.02)
    ones("output_norm.weight", N_EMBD)
    tensor("output.weight", N_EMBD, n_vocab)
    head_dim = N_EMBD // N_HEAD
    for i in range(N_LAYER):
        b = f"blk.{i}"
        ones(f"{b}.attn_norm.weight", N_EMBD)
        tensor(f"{b}.attn_q.weight", N_EMBD, N_EMBD)
        tensor(f"{b}.attn_k.weight", N_EMBD, N_HEAD_KV * head_dim)
        tensor(f"{b}.attn_v.weight", N_EMBD, N_HEAD_KV * head_dim)
        tensor(f"{b}.attn_output.weight", N_EMBD, N_EMBD)
        ones(f"{b}.ffn_norm.weight", N_EMBD)
        tensor(f"{b}.ffn_gate.weight", N_EMBD, N_FF)
        tensor(f"{b}.ffn_up.weight", N_EMBD, N_FF)
        tensor(f"{b}.ffn_down.weight", N_FF, N_EMBD)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"write_model.py: {args.out}: {n_vocab} tokens, {N_LAYER} layers of {N_EMBD}")


if __name__ == "__main__":
    main()
