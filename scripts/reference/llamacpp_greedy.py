#!/usr/bin/env python3
"""Writes the llama.cpp greedy-generation fixture for the engine's decode test.

llama.cpp (through llama-cpp-python, which compiles it from source) generates
greedily from a few fixed chat prompts on the same GGUF, twice:

* on an F32 copy of the weights made by llama.cpp's own
  `llama_model_quantize` (type ALL_F32): every block dequantized exactly as
  the router dequantizes it, products in f32 on both sides, so the router's
  f32 path must produce the same tokens (crates/router/tests/generate.rs);
* on the pinned quantized file itself, where llama.cpp rounds activations to
  8 bits as the router's int8 path does; the test reports how far the two
  agree.

K and V are kept in f32 (the router's layout). Greedy is the arg-max of the
last position's logits after each evaluated token; generation stops at the
vocabulary's end-of-generation tokens (llama.cpp's `llama_token_is_eog`) or
after MAX_NEW tokens.

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install numpy llama-cpp-python==0.3.16
    /tmp/refvenv/bin/python scripts/reference/llamacpp_greedy.py \
        assets/SmolLM2-135M-Instruct.Q4_1.gguf crates/router/tests/fixtures/smollm2_greedy.json
    /tmp/refvenv/bin/python scripts/reference/llamacpp_greedy.py \
        assets/gemma-3-270m-q4_k_m.gguf crates/router/tests/fixtures/gemma3_greedy.json
"""
import hashlib
import json
import os
import sys
import tempfile

import llama_cpp
import numpy as np
from llama_cpp import Llama

# The F32 copy exactly as the hidden-state fixture makes it (this folder is
# on the path when the script runs).
from llamacpp_reference import f32_copy

MAX_NEW = 48
QUESTIONS = [
    "Explain what a KV cache is in a transformer, in detail.",
    "Write a Python function that checks whether a string is a palindrome.",
    "List five things to check when a web server returns 502 errors.",
]


def chat(question: str, gemma: bool) -> str:
    if gemma:
        return f"<start_of_turn>user\n{question}<end_of_turn>\n<start_of_turn>model\n"
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def greedy(path: str, prompts: list) -> list:
    llm = Llama(
        model_path=path,
        n_ctx=1024,
        n_batch=512,
        # As the hidden-state fixture: micro-batches of 16 keep every
        # prefix self-consistent in this llama.cpp build.
        n_ubatch=16,
        n_threads=2,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        verbose=False,
    )
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    out = []
    for text in prompts:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        new = []
        for _ in range(MAX_NEW):
            # The last evaluated position's logits, read from the context.
            pointer = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
            logits = np.ctypeslib.as_array(pointer, shape=(llm.n_vocab(),)).copy()
            token = int(np.argmax(logits))
            # The margin between the best two logits: how close greedy was
            # to a tie at this step.
            top2 = np.partition(logits, -2)[-2:]
            new.append({"id": token, "margin": round(float(top2[1] - top2[0]), 5)})
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            llm.eval([token])
        out.append({"text": text, "ids": ids, "generated": [t["id"] for t in new], "margins": [t["margin"] for t in new]})
        print(f"{os.path.basename(path)}: {len(ids)} prompt tokens, {len(new)} generated: {llm.detokenize([t['id'] for t in new])!r}")
    return out


def main(model_path: str, out_path: str) -> None:
    data = open(model_path, "rb").read()
    gemma = b"<start_of_turn>" in data[:20_000_000]
    prompts = [chat(q, gemma) for q in QUESTIONS]
    scratch = tempfile.TemporaryDirectory()
    fixture = {
        "generator": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp), greedy, f32 K/V, n_ubatch 16",
        "model_sha256": hashlib.sha256(data).hexdigest(),
        "max_new": MAX_NEW,
        "f32_weights": greedy(f32_copy(model_path, scratch.name), prompts),
        "quantized": greedy(model_path, prompts),
    }
    with open(out_path, "w") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
