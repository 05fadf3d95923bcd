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
  hf_nfc/tokenizer.json           byte-level BPE, Qwen2 style (normalizer NFC, Split with
                                  Qwen2's regex + ByteLevel, no BOS), trained here
  hf_nfd/, hf_nfkd/               the same with normalizer NFD / NFKD, each trained here
  hf_nfkc/tokenizer.json          the same with a Sequence normalizer: NFKC, then Replace
                                  U+2019 -> "'" and Replace U+00C5 -> "Aa" (the order
                                  matters: U+212B ANGSTROM SIGN and A + U+030A become U+00C5
                                  only through NFKC)
  hf_added_gpt2/, hf_added_nfkc/, hf_added_spbpe/, hf_added_metaspace/
                                  hf_gpt2 / hf_nfkc / hf_spbpe / hf_metaspace with added tokens
                                  whose flags matter (lstrip, rstrip, single_word, normalized,
                                  special): added to the tokenizers made above, not trained
  tiktoken_gpt2/tokenizer.model   whisper's gpt2.tiktoken, read with Llama 3's pattern and
                                  special tokens
  expected_<name>.json            per corpus text: ids, ids with BOS, decoded text, decoded
                                  text without special tokens (base64), from the reference
                                  library; null where the reference cannot take the text
                                  (invalid UTF-8 for tokenizers/tiktoken)
  expected_sp_stories15M.json     sentencepiece on stories15M's tokenizer.model (scripts/fetch-stories15M)

The corpus is append-only: texts that need Unicode normalization come after the base
texts, then the texts about added tokens, so the indices of the earlier texts stay valid,
and the tokenizers that predate them are still trained on the texts they were trained on
(their tokenizer.json and the ids of those texts are unchanged; their expected_*.json only
gain cases at the end).
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


def stories15m_dir():
    """The folder scripts/fetch-stories15M finds (or downloads) stories15M into, or ""."""
    try:
        return subprocess.check_output(["bash", os.path.join(ROOT, "scripts", "fetch-stories15M")],
                                       text=True).strip()
    except subprocess.CalledProcessError:
        return ""


STORIES = os.path.join(stories15m_dir(), "tokenizer.model")


def ensure_venv(script=__file__):
    """Re-runs `script` with the venv's Python (creating the venv first if needed)."""
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VPY):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        pip = [VPY, "-m", "pip", "install", "-q"]
        # The versions the committed fixtures were made (and reproduced) with.
        subprocess.check_call(pip + ["sentencepiece==0.2.3", "tokenizers==0.23.3", "tiktoken==0.14.0"])
        subprocess.check_call(pip + ["--no-deps", "openai-whisper==20250625"])
    os.execv(VPY, [VPY, os.path.abspath(script)] + sys.argv[1:])


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

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

# The 90 characters that hf_spbpe / hf_metaspace keep (limit_alphabet=90) when training on
# the base texts. limit_alphabet alone breaks the tie at the cutoff (six characters seen 5
# times: I, ε, σ, и, р, 文, for five places) differently from run to run, and so the whole
# vocabulary; the committed fixtures kept all but р (U+0440). Listing them as
# initial_alphabet makes the training deterministic and reproduces those fixtures.
SPBPE_ALPHABET = ("\t\n!\"'()+,-.0123456789:;<>?BFHILOST_abcdefghijklmnopqrstuvwxyz|"
                  "\u00df\u00e8\u00fc\u03b1\u03b5\u03bc\u03c3\u0430\u0438\u05d5\u05dc\u05dd\u0627\u0628"
                  "\u0644\u0645\u0928\u2581\u3002\u3044\u3059\u3067\u306f\u559c\u6587\u65e5\u672c\u6b22")
assert len(SPBPE_ALPHABET) == 90


def corpus():
    """All texts: the original ones, then those that need Unicode normalization, then those
    about added tokens' flags."""
    return corpus_base() + corpus_normalization() + corpus_added_tokens()


def corpus_base():
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


def corpus_normalization():
    """Texts that NFC / NFD / NFKC / NFKD change (appended after corpus_base)."""
    import unicodedata
    nfd = lambda x: unicodedata.normalize("NFD", x)
    t = []
    def add(s, note):
        t.append((s.encode("utf-8"), note))
    add("cafe\u0301 caf\u00e9 re\u0301sume\u0301 r\u00e9sum\u00e9 nai\u0308ve na\u00efve E\u0301cole "
        "\u00c9cole n\u0303 \u00f1 u\u0308\u0304 \u01d6", "decomposed vs precomposed accents (e + U+0301)")
    add("\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165 \uac00\u11a8 \u1100\u1161 "
        "\u1100\u1161\u11a8 \uac01 \u1100 \u11a8 \ud7a3",
        "Hangul precomposed vs conjoining jamo (L+V, L+V+T, LV+T, lone jamo)")
    add("\ufb01nance \ufb02ow \ufb03 \u2460\u2461\u2473 \uff21\uff22\uff23 \uff41\uff42\uff43 \uff11\uff12\uff13 "
        "5\u338f 3\u339e \u212b \u2126 \u212a x\u00b2 y\u00b3 \u00bd \u2153 H\u2082O \u2167 \u2122 \u2026 "
        "\u01c5 \u017f \u3392", "compatibility characters (ligatures, circled, full-width, squares, "
        "ANGSTROM/OHM/KELVIN signs, super/subscripts, fractions)")
    add("a\u0323\u0302 a\u0302\u0323 \u1ea1\u0302 \u00e2\u0323 \u1ead q\u0307\u0323 q\u0323\u0307 "
        "o\u0301\u0316\u0334\u0345\u05b0 x\u0345\u0301 \u1e9b\u0323 e\u0301\u034f\u0323",
        "combining sequences that need canonical reordering (a + U+0323 + U+0302 vs a + U+0302 + U+0323; CGJ)")
    add("\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5 \u03ac \u1f71 "
        "\u03b1\u0301 \u0390 \u03ca\u0301 \u1fbe \u037e \u0387 \u0344 \u1f00\u0301 \u03d3 \u038f \u1ff9 "
        "\u03a9\u0301", "Greek with tonos / oxia, decomposed, singletons (U+037E, U+0387, U+1FBE)")
    add("\u0958 \u0915\u093c \u2adc \u0f73 \ufb2c \u30ab\u3099 \u30ac \uff76\uff9e\uff8a\uff9f \ufefb \u2000\u2003x",
        "composition exclusions, kana voicing marks, half-width kana, presentation forms, odd spaces")
    add("don\u2019t it\u2019s \u00c5ngstr\u00f6m \u212bngstr\u00f6m A\u030angstro\u0308m",
        "U+2019 and the three forms of \u00c5 (hf_nfkc Replace)")
    add("\u0301\u0308abc \u0323 \u0300", "combining marks with no starter")
    add(nfd("Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u: Ng\u01b0\u1eddi ta h\u1ecdc ti\u1ebfng Vi\u1ec7t.") +
        " / Ti\u1ebfng Vi\u1ec7t", "Vietnamese decomposed (NFD) and precomposed")
    add("Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e"
        "\u0320\u034dA\u0334\u0335\u031c\u0330\u0354\u036b\u0357\u0362L\u0320\u0368\u0367\u0369\u0358G\u0334"
        "\u033b\u0348\u034d\u0354\u0339\u0311\u0357\u030e\u0305\u035b\u0301", "long combining runs (zalgo)")
    add("\uff34\uff48\uff45 cafe\u0301 \ufb01nally served \u00bd\u338f of cre\u0300me bru\u0302le\u0301e "
        "(cr\u00e8me br\u00fbl\u00e9e) to \u212bngstr\u00f6m\u2019s guests at 10\u00a0\u00b0C \u2014 "
        "\u039a\u03b1\u03bb\u03b7\u03bc\u1f73\u03c1\u03b1! \u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165 "
        "\ud55c\uad6d\uc5b4 \u2460\u2461\u2462 x\u00b2 + y\u00b2 = z\u00b2\u2026 \u2122 "
        "a\u0302\u0323 \u1ead \uff21\uff22\uff23\uff11\uff12\uff13",
        "mixed long sentence needing every normalization")
    return t


def corpus_added_tokens():
    """Texts for the added tokens of the hf_added_* tokenizers (appended after
    corpus_normalization): whitespace around tokens with lstrip / rstrip (Unicode White_Space
    too), single_word boundaries (Rust regex's Unicode \\w: letters, marks, Nd, Pc, ZWJ/ZWNJ,
    circled letters; not No like U+00B2), tokens matched on the normalized text."""
    t = []
    def add(s, note):
        t.append((s.encode("utf-8"), note))
    add("Hello  World <|endoftext|> x", "lstrip+rstrip special between spaces")
    add("<|endoftext|>", "lstrip+rstrip special alone")
    add("  <|endoftext|>  ", "lstrip+rstrip special with spaces around")
    add("a<|endoftext|><|endoftext|>b", "adjacent lstrip+rstrip specials")
    add("a <|endoftext|>\n\n<|endoftext|>  b\t<|endoftext|>\u00a0\u3000c\u0085<|endoftext|>\u200bd \u2028<|endoftext|>",
        "strip over Unicode whitespace (NBSP, U+3000, NEL, U+2028; U+200B is not whitespace)")
    add("The capital of France is <mask>. A <mask><mask> and  <mask>x", "RoBERTa-style <mask> (lstrip)")
    add("<pad>  <pad>\n<pad>x <pad>", "rstrip only")
    add("<pad>  <|endoftext|> y", "rstrip then lstrip over the same spaces")
    add("<|endoftext|>\n\n\nx <|endoftext|>\n\n", "rstrip over the start of the next added token")
    add("sing ing ing, ing. (ing) ing_ ing2 ing\u00b2 ing\u24b6 ing\u200d ing\u200c \u00e9ing e\u0301ing ing\u00e9 "
        "ing\u0301 ING ing\u2160 ing\u0660 ing- -ing \u65e5ing ing\U0001F600", "single_word boundaries")
    add(" <sep> x<sep>y <sep>  ", "single_word + lstrip + rstrip")
    add("ing<|endoftext|>ing <mask>ing <sep><sep>", "single_word next to other added tokens")
    add("Hello World Hello World!HelloWorld hello world Hello  World", "non-special token with a space")
    add("file \ufb01le FILE \u2460\u2461 12 \u2474 don\u2019t don't \ufb01\ufb01le", "normalized vs raw added tokens")
    add("x <|fin|> <|\ufb01n|>y <|fin|>", "special token with normalized: true")
    add("ING ING\u00b2 ING\u24b6 _ING ING\u200d \u00e9ING \uff49\uff4e\uff47 \uff29\uff2e\uff27",
        "single_word on the normalized text")
    add("<raw>xING yING <raw>x\ufb01le", "normalized tokens in the pieces between raw ones")
    add("<x>a<x> b <x>", "normalized token under Prepend / Metaspace")
    add("<s>Hi</s> <s> Hi </s>  Hi Hi! <s>Hi", "Llama 2 specials with lstrip / rstrip, single_word Hi")
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
    # Tokenizers made before the normalization texts were appended train on the base
    # texts only, so that they (and the ids of the base texts) stay as they were.
    train = [b.decode("utf-8") for b, _ in corpus_base() if valid(b)] + EXTRA_TRAINING
    train_norm = train + [b.decode("utf-8") for b, _ in corpus_normalization()] * 3
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
    helper.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1000, limit_alphabet=90,
                                                          initial_alphabet=list(SPBPE_ALPHABET),
                                                          special_tokens=["<unk>"], show_progress=False))
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

    # (c2) byte-level, Qwen2 style, under each Unicode normalizer.
    for name, norm in [
        ("hf_nfc", normalizers.NFC()),
        ("hf_nfd", normalizers.NFD()),
        ("hf_nfkc", normalizers.Sequence([normalizers.NFKC(), normalizers.Replace("\u2019", "'"),
                                          normalizers.Replace("\u00c5", "Aa")])),
        ("hf_nfkd", normalizers.NFKD()),
    ]:
        tok = qwen2_style(norm, train_norm)
        save(tok, name)
        write_json(os.path.join(OUT, f"expected_{name}.json"), hf_expected(tok, texts, "<|endoftext|>"))

    # (c3) added tokens whose flags matter, on copies of the tokenizers above (not trained).
    A = lambda content, **kw: (content, kw)
    for name, base, bos_name, added in [
        ("hf_added_gpt2", "hf_gpt2", "<|endoftext|>", [
            A("<|endoftext|>", special=True, normalized=False, lstrip=True, rstrip=True),  # GPT-2 style EOS
            A("<mask>", special=True, normalized=False, lstrip=True),                       # RoBERTa's
            A("<pad>", special=True, normalized=False, rstrip=True),
            A("ing", special=False, normalized=False, single_word=True),  # also in the vocabulary
            A("<sep>", special=True, normalized=False, single_word=True, lstrip=True, rstrip=True),
            A("Hello World", special=False, normalized=True),
            A("\n\n", special=False, normalized=False),
        ]),
        ("hf_added_nfkc", "hf_nfkc", "<|endoftext|>", [
            A("\ufb01le", special=False, normalized=True),       # matched as "file"
            A("don\u2019t", special=False, normalized=True),     # matched as "don't" (Replace)
            A("\u2460\u2461", special=False, normalized=False),  # matched raw only
            A("ING", special=False, normalized=True, single_word=True),
            A("<|\ufb01n|>", special=True, normalized=True, lstrip=True),  # special, yet normalized
            A("<raw>x", special=False, normalized=False),
        ]),
        ("hf_added_spbpe", "hf_spbpe", "<s>", [
            A("<x>", special=False, normalized=True),  # matched as "\u2581<x>" (Prepend)
            A("<s>", special=True, normalized=False, rstrip=True),
            A("</s>", special=True, normalized=False, lstrip=True),
            A("Hi", special=False, normalized=True, single_word=True),
        ]),
        ("hf_added_metaspace", "hf_metaspace", "<s>", [
            A("<x>", special=False, normalized=True),
            A("</s>", special=True, normalized=False, lstrip=True, rstrip=True),
            A("Hi", special=False, normalized=True, single_word=True),
        ]),
    ]:
        tok = Tokenizer.from_file(os.path.join(OUT, base, "tokenizer.json"))
        for content, kw in added:
            (tok.add_special_tokens if kw["special"] else tok.add_tokens)([AddedToken(content, **kw)])
        save(tok, name)
        write_json(os.path.join(OUT, f"expected_{name}.json"), hf_expected(tok, texts, bos_name))

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


def qwen2_style(normalizer, train):
    """Byte-level BPE laid out like Qwen2's tokenizer.json: a normalizer, Split with Qwen2's
    regex (single digits) then ByteLevel without its own regex, ByteLevel decoder and
    post-processor, no BOS template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train, trainers.BpeTrainer(
        vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], show_progress=False))
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    return tok


def save(tok, name):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)


if __name__ == "__main__":
    ensure_venv()
    main()
