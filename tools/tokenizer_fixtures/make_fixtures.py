#!/usr/bin/env python3
"""Writes the tokenizer test fixtures under tests/fixtures/tokenizers/.

Creates its own virtual environment (tools/tokenizer_fixtures/.venv, ignored by git) with
the reference libraries — sentencepiece, tokenizers, tiktoken, openai-whisper (only for
its gpt2.tiktoken asset, installed without dependencies) — and re-runs itself there.

Outputs (all committed; CI has no Python):
  corpus.json                     texts as base64 (invalid UTF-8 survives) + a note each
  hf_bytelevel/tokenizer.json     byte-level BPE, Llama 3 style (Split regex + ByteLevel,
                                  ignore_merges, <|begin_of_text|> template), trained here
  hf_gpt2/tokenizer.json          byte-level BPE, GPT-2 style (ByteLevel with its regex,
                                  add_prefix_space), trained here
  hf_spbpe/tokenizer.json         SentencePiece-style BPE with byte fallback, Llama 2 /
                                  TinyLlama style (Prepend+Replace normalizers, Replace/
                                  ByteFallback/Fuse/Strip decoders), trained here
  hf_metaspace/tokenizer.json     the same vocabulary with a Metaspace pre-tokenizer and
                                  decoder (newer conversions of Llama 2)
  tiktoken_gpt2/tokenizer.model   whisper's gpt2.tiktoken, read with Llama 3's pattern and
                                  special tokens
  expected_<name>.json            per corpus text: ids, ids with BOS, decoded text, decoded
                                  text without special tokens (base64), from the reference
                                  library; null where the reference cannot take the text
                                  (invalid UTF-8 for tokenizers/tiktoken)
  expected_sp_stories15M.json     sentencepiece on ../shared/models/stories15M/tokenizer.model
"""
import base64
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
VENV = os.path.join(HERE, ".venv")
VPY = os.path.join(VENV, "bin", "python")
STORIES = os.path.abspath(os.path.join(ROOT, "..", "shared", "models", "stories15M", "tokenizer.model"))


def ensure_venv(script=__file__):
    """Re-runs `script` with the venv's Python (creating the venv first if needed)."""
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VPY):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        pip = [VPY, "-m", "pip", "install", "-q"]
        subprocess.check_call(pip + ["sentencepiece", "tokenizers", "tiktoken"])
        subprocess.check_call(pip + ["--no-deps", "openai-whisper"])
    os.execv(VPY, [VPY, os.path.abspath(script)] + sys.argv[1:])


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

PROSE = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
    "One day, she saw a big, red ball in the park. She ran to it and kicked it as hard as she could.",
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! "
    "How vexingly quick daft zebras jump; the five boxing wizards jump quickly.",
    "Tokenizers turn text into numbers: each piece of a word becomes an id, and the model reads ids. "
    "Byte-pair encoding merges the most frequent pairs of symbols, again and again, until the "
    "vocabulary is full. Byte fallback keeps every character representable.",
    "In the beginning the Universe was created. This has made a lot of people very angry and been "
    "widely regarded as a bad move. Forty-two is the answer; what was the question?",
    "Le cœur a ses raisons que la raison ne connaît point. Où est la bibliothèque ? "
    "Ça va très bien, merci. Die Straße ist naß, und die Bäume blühen früh.",
    "東京は日本の首都です。今日はいい天気ですね。我喜欢学习中文，也喜欢读书。서울은 한국의 수도입니다.",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(add(i, i * 2))\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14159 2.71828 -1 +1 1e10 0xFF 1,234,567.",
    "Она сказала: «Привет!» Καλημέρα κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया.",
]

def corpus():
    t = []
    def add(s, note):
        t.append((s.encode("utf-8") if isinstance(s, str) else s, note))
    add("", "empty")
    add("Hello, world!", "ascii")
    add("Hello, wörld! 123 ü 日本", "README example")
    add("Once upon a time", "llama2.c example")
    add("Café naïve résumé — déjà vu; Ærøskøbing; straße; İstanbul; ÿ", "accents")
    add("日本語のテキストと中文文本，还有한국어 텍스트。", "CJK")
    add("I ❤️ 🦙 llamas 👩‍👩‍👧‍👦 🇫🇷 😀😃 ✨", "emoji")
    add("1 12 123 1234 12345 3.14159 -42 1,000,000 0x1F 2024-05-01 ١٢٣", "numbers")
    add("a  b   c\t\td \t \n  e    ", "whitespace runs")
    add("   leading and trailing   ", "leading/trailing spaces")
    add("line1\nline2\n\nline4\r\nline5\n\n\n", "newlines")
    add(" ", "one space")
    add("  ", "two spaces")
    add("\n", "newline")
    add("\t", "tab")
    add(PROSE[6], "python code")
    add(PROSE[7], "C code")
    add("<|begin_of_text|>Hello<|eot_id|> world<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
        "special tokens in text")
    add("<s>text</s> <unk> <|endoftext|> after", "sentencepiece-style specials in text")
    add("x<|eot_id|><|eot_id|>y <|reserved_special_token_3|>", "adjacent specials")
    add("<|begin_of_tex", "partial special")
    add("I'm, you're, they'll, we've, she'd, it's, DON'T, 'S", "contractions")
    add("Привет мир! Γειά σου κόσμε! مرحبا بالعالم שלום", "scripts")
    add("supercalifragilisticexpialidocious", "long word")
    add("a" * 40, "repeated letter")
    add("https://example.com/path?q=1&r=two#frag", "url")
    add("e\u0301 a\u200bb a\u00a0b \u3000x\u2028y \u0085z", "combining/zero-width/odd spaces")
    add("ÿÿÿ ¡¿ ©®™ €£¥", "latin-1 range")
    add("😀", "single emoji")
    add("日", "single CJK")
    add("\x00\x01\x7f", "control characters")
    for i, p in enumerate(PROSE):
        add(p, f"prose {i}")
    add("\n".join(PROSE), "all prose")
    # Invalid UTF-8 (no reference for tokenizers/tiktoken: they take str).
    add(b"abc\xff\xfedef", "invalid: ff fe")
    add(b"\xc3(", "invalid: truncated 2-byte")
    add(b"\xe6\x97", "invalid: truncated 3-byte at end")
    add(b"caf\xe9 latin-1", "invalid: latin-1 byte")
    add(b"\xed\xa0\x80 surrogate", "invalid: encoded surrogate")
    add(b"\x80\x80 lone continuation", "invalid: lone continuation bytes")
    return t


EXTRA_TRAINING = PROSE + [
    "the of and to in is was that for it with as on be at by this had not are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three",
] * 3


def b64(b):
    return base64.b64encode(b).decode("ascii")


def valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def hf_expected(tok, texts, bos_name):
    cases = []
    for b, _ in texts:
        if not valid(b):
            cases.append(None)
            continue
        s = b.decode("utf-8")
        ids = tok.encode(s, add_special_tokens=False).ids
        ids_bos = tok.encode(s, add_special_tokens=True).ids
        cases.append({
            "ids": ids,
            "ids_bos": ids_bos,
            "decoded": b64(tok.decode(ids, skip_special_tokens=False).encode("utf-8")),
            "decoded_skip": b64(tok.decode(ids, skip_special_tokens=True).encode("utf-8")),
        })
    return {"bos_id": tok.token_to_id(bos_name), "cases": cases}


def main():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    import sentencepiece as spm
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    import importlib.util  # whisper itself needs torch: only locate its package folder
    whisper_dir = importlib.util.find_spec("whisper").submodule_search_locations[0]

    os.makedirs(OUT, exist_ok=True)
    texts = corpus()
    write_json(os.path.join(OUT, "corpus.json"), [{"b64": b64(b), "note": n} for b, n in texts])
    train = [b.decode("utf-8") for b, _ in texts if valid(b)] + EXTRA_TRAINING
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

    # (b) byte-level, Llama 3 style.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train, trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials,
        show_progress=False))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))]),
    ])
    save(tok, "hf_bytelevel")
    write_json(os.path.join(OUT, "expected_hf_bytelevel.json"), hf_expected(tok, texts, "<|begin_of_text|>"))

    # (b2) byte-level, GPT-2 style.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train, trainers.BpeTrainer(
        vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"],
        show_progress=False))
    save(tok, "hf_gpt2")
    write_json(os.path.join(OUT, "expected_hf_gpt2.json"), hf_expected(tok, texts, "<|endoftext|>"))

    # (c) SentencePiece-style with byte fallback: learn merges on ▁-words, then lay the
    # vocabulary out as Llama 2's (<unk>, <s>, </s>, <0x00>..<0xFF>, pieces).
    helper = Tokenizer(models.BPE(unk_token="<unk>"))
    helper.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    helper.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    helper.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1000, limit_alphabet=90, special_tokens=["<unk>"],
                                                          show_progress=False))
    hj = json.loads(helper.to_str())
    learned = sorted(((i, t) for t, i in hj["model"]["vocab"].items() if t != "<unk>"))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for _, t in learned:
        vocab.setdefault(t, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in hj["model"]["merges"]]

    def sp_style(metaspace):
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        if metaspace:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
            tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                             decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)])
        else:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
        return tok

    for name, ms in [("hf_spbpe", False), ("hf_metaspace", True)]:
        tok = sp_style(ms)
        save(tok, name)
        write_json(os.path.join(OUT, f"expected_{name}.json"), hf_expected(tok, texts, "<s>"))

    # (d) tiktoken: whisper's gpt2.tiktoken with Llama 3's pattern and special tokens.
    src = os.path.join(whisper_dir, "assets", "gpt2.tiktoken")
    os.makedirs(os.path.join(OUT, "tiktoken_gpt2"), exist_ok=True)
    with open(src, "rb") as f:
        data = f.read()
    with open(os.path.join(OUT, "tiktoken_gpt2", "tokenizer.model"), "wb") as f:
        f.write(data)
    ranks = load_tiktoken_bpe(src)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|reserved_special_token_2|>", "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|reserved_special_token_4|>", "<|eot_id|>"] + [f"<|reserved_special_token_{i}|>" for i in range(5, 256 - 5)]
    n = len(ranks)
    enc = tiktoken.Encoding("gpt2_llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                            special_tokens={t: n + i for i, t in enumerate(names)})
    cases = []
    for b, _ in texts:
        if not valid(b):
            cases.append(None)
            continue
        ids = enc.encode(b.decode("utf-8"), allowed_special="all")
        cases.append({"ids": ids, "ids_bos": [n] + ids, "decoded": b64(enc.decode_bytes(ids)),
                      "decoded_skip": b64(enc.decode_bytes([i for i in ids if i < n]))})
    write_json(os.path.join(OUT, "expected_tiktoken_gpt2.json"), {"bos_id": n, "cases": cases})

    # (a) sentencepiece on stories15M's tokenizer.model.
    if os.path.exists(STORIES):
        sp = spm.SentencePieceProcessor(model_file=STORIES)
        cases = []
        for b, _ in texts:
            try:
                ids = sp.encode(b if not valid(b) else b.decode("utf-8"))
            except Exception:
                cases.append(None)
                continue
            dec = sp.decode(ids)
            dec = dec.encode("utf-8") if isinstance(dec, str) else dec
            cases.append({"ids": ids, "ids_bos": [sp.bos_id()] + ids, "decoded": b64(dec), "decoded_skip": b64(dec)})
        write_json(os.path.join(OUT, "expected_sp_stories15M.json"), {"bos_id": sp.bos_id(), "cases": cases})
    else:
        print(f"warning: {STORIES} not found; expected_sp_stories15M.json not written", file=sys.stderr)

    for dirpath, _, files in os.walk(OUT):
        for fn in sorted(files):
            p = os.path.join(dirpath, fn)
            print(f"{os.path.getsize(p):>9}  {os.path.relpath(p, ROOT)}")


def save(tok, name):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)


if __name__ == "__main__":
    ensure_venv()
    main()
