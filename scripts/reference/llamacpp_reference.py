#!/usr/bin/env python3
"""Writes the llama.cpp reference fixture for the router's correctness test.

llama.cpp (through llama-cpp-python, which compiles it from source) runs the
same GGUF file and records, for a few fixed texts, the token ids and the final
hidden state (after the output norm; llama.cpp's embeddings with pooling
NONE): the mean over tokens and the last token's vector. The Rust test
(crates/router/tests/reference.rs) compares candle's forward pass with these.

Run once, commit only the small JSON it writes:

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install numpy llama-cpp-python==0.3.16
    /tmp/refvenv/bin/python scripts/reference/llamacpp_reference.py \
        assets/SmolLM2-135M-Instruct.Q4_1.gguf crates/router/tests/fixtures/smollm2_llamacpp.json
"""
import hashlib
import json
import sys

import llama_cpp
import numpy as np
from llama_cpp import Llama

TEXTS = [
    "<|im_start|>user\nFix the failing test in astropy's TimeSeries when a required column is removed.<|im_end|>\n",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The KV cache of 32 layers × 8 heads × 128 dims in bf16 costs 131072 bytes per token.",
    "Hello",
]
TOKENIZER_STRINGS = [
    "Hello world",
    "  leading spaces and 12345 digits",
    "naïve café — “quotes” 🚀",
    "<|im_start|>system\nYou route.<|im_end|>\n",
    "x=1;y=22;z=333\n\n\tdone",
]


def main(model_path: str, out_path: str) -> None:
    data = open(model_path, "rb").read()
    llm = Llama(
        model_path=model_path,
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_NONE,
        n_ctx=2048,
        n_batch=2048,
        # Micro-batches of 16 tokens. In llama-cpp-python 0.3.16 on this
        # x86-64 CPU, a micro-batch of 32 or more tokens takes another matmul
        # path whose results change with the batch length (token 0 of a
        # 33-token text differs from the same token alone: cosine 0.968),
        # which a causal model cannot do. With 16 every prefix is
        # self-consistent; the mathematics is the same.
        n_ubatch=16,
        n_threads=2,
        verbose=False,
    )
    raw_tokenize = llm.tokenize
    # The router parses special tokens in its routing text and adds no BOS.
    tokenize = lambda b, add_bos=True, special=False: raw_tokenize(b, add_bos=False, special=True)  # noqa: E731
    llm.tokenize = tokenize
    cases = []
    for text in TEXTS:
        ids = tokenize(text.encode("utf-8"))
        hidden = np.array(llm.embed(text, normalize=False), dtype=np.float64)
        assert hidden.shape[0] == len(ids), (hidden.shape, len(ids))
        cases.append(
            {
                "text": text,
                "ids": ids,
                "mean": [round(float(x), 6) for x in hidden.mean(axis=0)],
                "last": [round(float(x), 6) for x in hidden[-1]],
            }
        )
    tokenizer = [{"text": s, "ids": tokenize(s.encode("utf-8"))} for s in TOKENIZER_STRINGS]
    fixture = {
        "generator": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), embeddings with pooling NONE",
        "model_sha256": hashlib.sha256(data).hexdigest(),
        "cases": cases,
        "tokenizer": tokenizer,
    }
    with open(out_path, "w") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
    print(f"wrote {out_path}: {len(cases)} forward cases, {len(tokenizer)} tokenizer cases")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
