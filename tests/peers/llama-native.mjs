// node-llama-cpp's prebuilt linux-x64 binaries, loaded as every native peer
// script loads them: CPU only, never a download or a compile, and the CPU
// variant ggml chose recorded.
//
// ggml loads the CPU variant (haswell, icelake, zen4, sapphirerapids, …)
// whose instructions this machine offers, and that choice decides
// llama.cpp's speed here: on an earlier VM of the same CPU name (likely one
// that exposed AMX, and so the sapphirerapids variant) its prefill ran about
// 2.4× faster than with the zen4 variant on a VM without AMX. That run did
// not record the variant; the reports now name it. Its line comes at the
// `log` level; only warnings and errors are passed on.

import { basename } from 'node:path';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';

/** `{ llama, cpuVariant() }`: the loaded library and the variant's file name once known. */
export async function nativeLlama() {
  let cpuVariant = null;
  const llama = await getLlama({
    gpu: false,
    build: 'never',
    usePrebuiltBinaries: true,
    skipDownload: true,
    logLevel: LlamaLogLevel.log,
    logger: (level, message) => {
      const loaded = message.match(/loaded CPU backend from (\S+)/);
      if (loaded) cpuVariant = basename(loaded[1]);
      else if ([LlamaLogLevel.fatal, LlamaLogLevel.error, LlamaLogLevel.warn].includes(level)) console.error(`llama.cpp: ${message.trim()}`);
    },
    maxThreads: 0,
  });
  return { llama, cpuVariant: () => cpuVariant };
}
