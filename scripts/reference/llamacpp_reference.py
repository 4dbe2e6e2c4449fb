#!/usr/bin/env python3
"""Writes the llama.cpp reference fixture for the router's correctness test.

llama.cpp (through llama-cpp-python, which compiles it from source) runs the
same GGUF file and records, for a few fixed texts, the token ids and the final
hidden state (after the output norm; llama.cpp's embeddings with pooling
NONE): the mean over tokens and the last token's vector. The Rust test
(crates/router/tests/reference.rs) compares candle's forward pass with these.

Run once per checkpoint, commit only the small JSON it writes:

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install numpy llama-cpp-python==0.3.16
    /tmp/refvenv/bin/python scripts/reference/llamacpp_reference.py \
        assets/SmolLM2-135M-Instruct.Q4_1.gguf crates/router/tests/fixtures/smollm2_llamacpp.json
    /tmp/refvenv/bin/python scripts/reference/llamacpp_reference.py --long --f32-weights \
        assets/gemma-3-270m-q4_k_m.gguf crates/router/tests/fixtures/gemma3_llamacpp.json

Token ids are llama.cpp's with special-token parsing on, and a BOS exactly
when the GGUF asks for one (`tokenizer.ggml.add_bos_token`: Gemma yes,
SmolLM2 no), as the router encodes them. `--long` adds a text of more than
512 tokens, so that Gemma's sliding-window layers (window 512) cut keys off.

`--f32-weights` runs llama.cpp on an F32 copy of the same weights, made by
llama.cpp's own `llama_model_quantize` (type ALL_F32): every block is
dequantized exactly as the router dequantizes it, and llama.cpp then
multiplies in f32 instead of quantizing its activations to 8 bits. Gemma's
states are sensitive to that 8-bit rounding (it alone moves the last token's
state by cosine ≈ 0.998, in llama.cpp and in the router's own quantized
mode), which would hide any real difference behind it; with it gone the two
implementations can be held to a tight tolerance. The fixture records the
hash of the file given (the pinned checkpoint), not of the copy.
"""
import ctypes
import hashlib
import json
import os
import sys
import tempfile

import llama_cpp
import numpy as np
from llama_cpp import Llama

TEXTS = [
    "<|im_start|>user\nFix the failing test in astropy's TimeSeries when a required column is removed.<|im_end|>\n",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The KV cache of 32 layers × 8 heads × 128 dims in bf16 costs 131072 bytes per token.",
    "Hello",
]
# Longer than Gemma 3's 512-token window: its local layers must drop the
# oldest keys for the last tokens.
LONG_TEXT = "\n".join(
    f"Step {i}: route request {i * 7 % 13} to model {i % 8} when its prompt holds {i * 37 % 1000} tokens and the budget is ${i * 0.13:.2f}."
    for i in range(40)
)
TOKENIZER_STRINGS = [
    "Hello world",
    "  leading spaces and 12345 digits",
    "naïve café — “quotes” 🚀",
    "<|im_start|>system\nYou route.<|im_end|>\n",
    "x=1;y=22;z=333\n\n\tdone",
    "<start_of_turn>user\nRoute this.<end_of_turn>\n<start_of_turn>model\n",
    "tabs\t\tand   spaces\n\n\nthree newlines <div>html</div>",
    "日本語のテキストと한국어 and 𓀀𓀁 outside the vocabulary",
]


def f32_copy(model_path: str, directory: str) -> str:
    out = os.path.join(directory, "f32.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = 2
    if llama_cpp.llama_model_quantize(model_path.encode(), out.encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize could not write an F32 copy of {model_path}")
    return out


def main(model_path: str, out_path: str, long: bool, f32_weights: bool) -> None:
    data = open(model_path, "rb").read()
    scratch = tempfile.TemporaryDirectory()
    run_path = f32_copy(model_path, scratch.name) if f32_weights else model_path
    llm = Llama(
        model_path=run_path,
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
        # K and V kept in f32 rather than llama.cpp's default f16, as the
        # router keeps them.
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        verbose=False,
    )
    raw_tokenize = llm.tokenize
    # The router parses special tokens in its routing text; llama.cpp adds
    # a BOS only when the vocabulary asks for one.
    tokenize = lambda b, add_bos=True, special=False: raw_tokenize(b, add_bos=True, special=True)  # noqa: E731
    llm.tokenize = tokenize
    cases = []
    for text in TEXTS + ([LONG_TEXT] if long else []):
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
        "generator": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), embeddings with pooling NONE, f32 K/V"
        + (", on an F32 copy of the weights (llama_model_quantize ALL_F32)" if f32_weights else ""),
        "model_sha256": hashlib.sha256(data).hexdigest(),
        "cases": cases,
        "tokenizer": tokenizer,
    }
    with open(out_path, "w") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
    print(f"wrote {out_path}: {len(cases)} forward cases, {len(tokenizer)} tokenizer cases")


if __name__ == "__main__":
    flags = {"--long", "--f32-weights"}
    args = [a for a in sys.argv[1:] if a not in flags]
    main(args[0], args[1], "--long" in sys.argv[1:], "--f32-weights" in sys.argv[1:])
