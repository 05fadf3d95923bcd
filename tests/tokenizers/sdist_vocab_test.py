"""ctest's Tokenizers.sdist_vocabularies: the real tokenizers of the families linnet runs, from
the vocabulary files PyPI's llama-cpp-python 0.3.36 sdist carries (vendor/llama.cpp/models/
ggml-vocab-*.gguf, the sdist pinned by sha256 in tests/chat_templates/sdist.txt), written as a
Hugging Face tokenizer folder by transformers 5.24's own GGUF converter; then every text of the
sdist's test inputs (ggml-vocab-*.gguf.inp) and a corpus of our own is tokenized by
transformers and by `linnet tokenize`: the ids must be equal, with and without the special
tokens transformers adds (linnet's --add-bos auto rule, docs/tokenizers.md). Also o200k_harmony's
shape (gpt-oss's pre-tokenizer and special tokens) on Llama 3's merges (o200k_harmony below). Nothing fetched
is committed. Run by sdist_vocab_test.sh (the venv of tests/serve) as:
    sdist_vocab_test.py LINNET SOURCE WORK
Exits 77 (skipped, with the reason) when PyPI cannot be reached.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile

LINNET, SOURCE, WORK = sys.argv[1:4]
# The vocabularies of the families linnet runs: Llama 3 (BPE) and Llama 2 / Mistral
# (SentencePiece), Qwen2 / Qwen3, Phi-3 / Phi-4-mini, Gemma (the sdist carries Gemma 4's, the
# SentencePiece-BPE shape of Gemma 2/3), Qwen3.5.
VOCABS = ["ggml-vocab-llama-bpe.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen2.gguf", "ggml-vocab-phi-3.gguf",
          "ggml-vocab-gemma-4.gguf", "ggml-vocab-qwen35.gguf"]
CORPUS = ["Hello world", " Hello world", "Hello  World <|endoftext|> x", "", " ", "\n\n\n", "\t tabs\tand  spaces ",
          "Grüße, 世界 🌍 — \"quotes\" <tags> é", "1234567890 3.14159 -42", "don't won't I'm we'll",
          "def f(x):\n    return x**2  # code\n", "ÅngströmⅫ ﬁ ｆｕｌｌ", "a" * 300, "<s> </s> <unk> [INST] hi [/INST]",
          "The quick brown fox jumps over the lazy dog. " * 5]

# transformers' GGUF reader imports torch for tensors, which a tokenizer never reads (the package
# is gigabytes and the venv has none): the import gets a stand-in, as tests/serve/chat_cases.py.
WRITE = r"""
import sys, types
from transformers import PreTrainedTokenizerFast
stand_in = types.ModuleType("torch")
stand_in.__getattr__ = lambda name: type(name, (), {})
sys.modules["torch"] = stand_in
models, vocab, out = sys.argv[1:4]
tok = PreTrainedTokenizerFast.from_pretrained(models, gguf_file=vocab)
tok.save_pretrained(out)
"""


def fail(what):
    print(f"FAILED: {what}")
    sys.exit(1)


def sdist_models():
    d = os.path.join(WORK, "vocab-models")
    if all(os.path.exists(os.path.join(d, v)) for v in VOCABS):
        return d
    # The sdist is fetched once per build folder (tests/sdist/fetch_sdist.sh, shared with the
    # chat-template tests); 77 passes on as this test's skip.
    r = subprocess.run(["bash", os.path.join(SOURCE, "tests/sdist/fetch_sdist.sh"), SOURCE,
                        os.path.join(os.path.dirname(WORK), "sdist-work")], capture_output=True, text=True, timeout=900)
    if r.returncode == 77:
        print(r.stderr.strip())
        sys.exit(77)
    if r.returncode != 0:
        fail(f"fetch_sdist.sh failed: {r.stderr[-1000:]}")
    tarball = r.stdout.strip()
    tmp = d + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    wanted = set(VOCABS) | {v + ".inp" for v in VOCABS}
    with tarfile.open(tarball) as t:
        for m in t.getmembers():
            name = os.path.basename(m.name)
            if "/vendor/llama.cpp/models/" in m.name and m.isfile() and name in wanted:
                with t.extractfile(m) as src, open(os.path.join(tmp, name), "wb") as dst:
                    shutil.copyfileobj(src, dst)
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)
    return d


# o200k_harmony (gpt-oss): its vocabulary file is not on PyPI (tiktoken downloads it at run
# time), so its tokenizer.json's shape is checked on Llama 3's merges: o200k's pre-tokenizer
# (the Split regex, then ByteLevel without its own), no BOS template, and harmony's special
# tokens, as gpt-oss's tokenizer.json has them; made with the `tokenizers` library.
O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HARMONY = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
           "<|message|>", "<|call|>", "<|endofprompt|>"]
HARMONY_CORPUS = [
    "<|start|>system<|message|>You are ChatGPT.\nReasoning: high<|end|><|start|>user<|message|>What's 2+2?<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
    "CamelCaseWords HTTPServer naïveÉCOLE ÅNGSTRÖM's I'M WE'LL", "1234567 12 3.14159", "Ünïcödé\u0301 marks\u0308 x",
]


def o200k_harmony(llama_bpe_folder):
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    folder = os.path.join(WORK, "tok-o200k-harmony")
    os.makedirs(folder, exist_ok=True)
    t = Tokenizer.from_file(os.path.join(llama_bpe_folder, "tokenizer.json"))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    t.post_processor = None
    t.add_special_tokens(HARMONY)
    t.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|return|>"}, f)
    return folder


def compare(name, folder, texts):
    """linnet tokenize vs transformers on `texts`, without and with the special tokens; the count."""
    from transformers import PreTrainedTokenizerFast
    ref = PreTrainedTokenizerFast.from_pretrained(folder)
    lines = os.path.join(WORK, name + ".jsonl")
    with open(lines, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    for special in (False, True):
        args = [LINNET, "tokenize", "--checkpoint", folder, "--jsonl", lines]
        r = subprocess.run(args + (["--add-bos", "auto"] if special else []), capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            fail(f"{name}: linnet tokenize failed: {r.stderr[-2000:]}")
        got = [json.loads(x) for x in r.stdout.splitlines()]
        if len(got) != len(texts):
            fail(f"{name}: {len(got)} lines from linnet for {len(texts)} texts")
        bad = 0
        for t, g in zip(texts, got):
            want = ref(t, add_special_tokens=special)["input_ids"]
            if g != want:
                bad += 1
                if bad <= 3:
                    print(f"{name} (special {special}): {t[:60]!r}\n  transformers {want[:24]}\n  linnet       {g[:24]}")
        if bad:
            fail(f"{name}: {bad} of {len(texts)} texts tokenize otherwise than transformers (special {special})")
    print(f"{name}: {len(texts)} texts, ids equal to transformers' with and without special tokens")
    return 2 * len(texts)


def main():
    models = sdist_models()
    total = 0
    for vocab in VOCABS:
        folder = os.path.join(WORK, "tok-" + vocab.replace(".gguf", ""))
        if not os.path.exists(os.path.join(folder, "tokenizer.json")):
            r = subprocess.run([sys.executable, "-c", WRITE, models, vocab, folder], capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                fail(f"{vocab}: transformers could not write the tokenizer: {r.stderr[-2000:]}")
        texts = list(CORPUS)
        inp = os.path.join(models, vocab + ".inp")
        if os.path.exists(inp):
            texts += [t for t in open(inp, encoding="utf-8").read().split("\n__ggml_vocab_test__\n") if t]
        total += compare(vocab, folder, texts)
        if vocab == "ggml-vocab-llama-bpe.gguf":
            total += compare("o200k_harmony (Llama 3's merges)", o200k_harmony(folder), texts + HARMONY_CORPUS)
    print(f"sdist vocabularies: {total} tokenizations equal")


main()
