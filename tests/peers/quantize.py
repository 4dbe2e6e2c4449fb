"""Makes a Q4_0 / Q8_0 / … copy of a GGUF with llama.cpp's own quantizer.

The peer bench compares against each peer's best configuration on the same
weights, and Q4_1 (the bundled checkpoint's type) is a slow path in
llama.cpp; so the bench requantizes the bundled file to the types llama.cpp
is fastest on. The quantizer is `llama_model_quantize` in the `libllama`
that npm `node-llama-cpp`'s prebuilt linux-x64 package ships (dev-only, in
tests/peers/node_modules), called through the standard library's ctypes.

    python3 tests/peers/quantize.py SRC.gguf DST.gguf Q8_0

llama.h is not in that package, so the parameter struct is treated as opaque
bytes that `llama_model_quantize_default_params` fills; the fields written
here (thread count at offset 0, file type at 4, allow_requantize at 16) are
checked against that function's known defaults first, so a release whose
layout moved fails with a message instead of quantizing with garbage.
"""

import ctypes
import pathlib
import sys

# llama_ftype values (stable across llama.cpp releases).
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9}
LIB = pathlib.Path(__file__).parent / "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
PARAMS_BYTES = 512  # more than any release's struct (64 bytes in v0.4.0)


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[3] not in FTYPES:
        print(f"usage: quantize.py SRC.gguf DST.gguf {{{'|'.join(FTYPES)}}}", file=sys.stderr)
        return 2
    src, dst, kind = sys.argv[1:]
    candidates = sorted(LIB.glob("libllama*.so"))
    if not candidates:
        print(f"quantize: no libllama under {LIB} (npm ci --prefix tests/peers first)", file=sys.stderr)
        return 1
    lib = ctypes.CDLL(str(candidates[0]))
    # llama.cpp logs a line per tensor; only errors matter to the bench
    # (ggml_log_level: 4 is GGML_LOG_LEVEL_ERROR).
    logger = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    quiet = logger(lambda level, text, _: sys.stderr.write(text.decode(errors="replace")) if level == 4 else None)
    lib.llama_log_set.argtypes, lib.llama_log_set.restype = [logger, ctypes.c_void_p], None
    lib.llama_log_set(quiet, None)
    lib.llama_backend_init.argtypes, lib.llama_backend_init.restype = [], None
    lib.llama_backend_init()

    # The struct is returned in memory (it is larger than 16 bytes), so on
    # x86-64 System V the callee writes through a hidden first argument:
    # calling it with our own buffer as that argument is the same ABI.
    defaults = lib.llama_model_quantize_default_params
    defaults.argtypes, defaults.restype = [ctypes.c_void_p], None
    params = (ctypes.c_uint8 * PARAMS_BYTES)()
    defaults(ctypes.addressof(params))
    raw = bytes(params)
    nthread, allow_requantize, quantize_output = int.from_bytes(raw[0:4], "little"), raw[16], raw[17]
    if (nthread, allow_requantize, quantize_output) != (0, 0, 1):
        print(f"quantize: unexpected default parameters {raw[:24].hex(' ')}; this libllama's layout differs", file=sys.stderr)
        return 1
    params[4:8] = FTYPES[kind].to_bytes(4, "little")
    params[16] = 1  # allow_requantize: the source is already quantized (Q4_1)

    quantize = lib.llama_model_quantize
    quantize.argtypes, quantize.restype = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.c_uint32
    status = quantize(src.encode(), dst.encode(), ctypes.addressof(params))
    if status != 0:
        print(f"quantize: llama_model_quantize({src} → {dst}, {kind}) returned {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
