#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizers/bos_cases.json: whether transformers adds BOS, for each
kind of tokenizer file linnet loads and each tokenizer_config.json / config.json situation.

Creates its own virtual environment (tools/tokenizer_fixtures/.venv-transformers, ignored by
git) with the pinned versions below and re-runs itself there. For each case it lays out a
folder as a linnet checkpoint has it (the tokenizer file, config.json unless the case has
none, tokenizer_config.json when the case has one), loads it with
`AutoTokenizer.from_pretrained(folder)` and records, for a few texts, `tok(text)["input_ids"]`
and `tok(text, add_special_tokens=False)["input_ids"]` (or the error when transformers cannot
load the folder), the class it chose, its bos/eos/unk tokens, and the warnings it logged.

The tokenizer files: the committed fixtures of make_fixtures.py (hf_bytelevel: a
TemplateProcessing that adds <|begin_of_text|>; hf_spbpe: one that adds <s>; hf_gpt2: no
post-processor; hf_nfc: a ByteLevel post-processor; tiktoken_gpt2: a tiktoken rank file as
tokenizer.model) and stories15M's tokenizer.model (SentencePiece) and tokenizer.bin
(llama2.c), found by scripts/fetch-stories15M; "stories15M:<file>" in the fixture.

Append-only: new cases go at the end (tests index nothing, but diffs stay readable).
"""
import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
OUT = os.path.join(FIX, "bos_cases.json")
VENV = os.path.join(HERE, ".venv-transformers")
VPY = os.path.join(VENV, "bin", "python")
PINNED = ["transformers==5.24.0", "tokenizers==0.23.3", "sentencepiece==0.2.3", "tiktoken==0.14.0", "protobuf==7.36.2",
          "huggingface_hub==2.4.0"]
TEXTS = ["Hello world", "", "Once upon a time"]


def ensure_venv():
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VPY):
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([VPY, "-m", "pip", "install", "-q"] + PINNED)
    os.execv(VPY, [VPY, os.path.abspath(__file__)] + sys.argv[1:])


def stories15m_dir():
    try:
        return subprocess.check_output(["bash", os.path.join(ROOT, "scripts", "fetch-stories15M")], text=True).strip()
    except subprocess.CalledProcessError:
        return ""


# Where each tokenizer comes from, and the name it has in a checkpoint folder.
TOKENIZERS = {
    "hf_bytelevel": ("tests/fixtures/tokenizers/hf_bytelevel/tokenizer.json", "tokenizer.json"),
    "hf_spbpe": ("tests/fixtures/tokenizers/hf_spbpe/tokenizer.json", "tokenizer.json"),
    "hf_gpt2": ("tests/fixtures/tokenizers/hf_gpt2/tokenizer.json", "tokenizer.json"),
    "hf_nfc": ("tests/fixtures/tokenizers/hf_nfc/tokenizer.json", "tokenizer.json"),
    "sp_stories15M": ("stories15M:tokenizer.model", "tokenizer.model"),
    "tiktoken_gpt2": ("tests/fixtures/tokenizers/tiktoken_gpt2/tokenizer.model", "tokenizer.model"),
    "llama2c_stories15M": ("stories15M:tokenizer.bin", "tokenizer.bin"),
    # hf_spbpe with "post_processor": null (the tests make it the same way).
    "hf_spbpe_no_post_processor": ("tests/fixtures/tokenizers/hf_spbpe/tokenizer.json", "tokenizer.json"),
}
NO_POST_PROCESSOR = {"hf_spbpe_no_post_processor"}

# config.json as linnet writes it (the keys AutoTokenizer may read: model_type, architectures,
# bos/eos ids).
def model_config(model_type):
    if model_type is None:
        return None
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[model_type]
    return {"architectures": [arch], "model_type": model_type, "bos_token_id": 1, "eos_token_id": 2,
            "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 32000}


CLASSES = ["PreTrainedTokenizerFast", "TokenizersBackend", "LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
           "GemmaTokenizerFast", "Qwen2Tokenizer", "GPT2Tokenizer", "GPTNeoXTokenizerFast"]

# bos_token given in tokenizer_config.json (a string, null, or an AddedToken object).
BOS_TOKEN_CONFIGS = [
    {"add_bos_token": True, "bos_token": "<s>"},
    {"tokenizer_class": "TokenizersBackend", "add_bos_token": True, "bos_token": "<s>"},
    {"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": True, "bos_token": "<s>"},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": {
        "__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False, "special": True}},
    {"add_bos_token": True, "bos_token": None},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": None},
    {"tokenizer_class": "CodeLlamaTokenizer", "bos_token": None},
    {"tokenizer_class": "CodeLlamaTokenizer", "add_bos_token": None},
    {"add_bos_token": None},
]


def tokenizer_configs():
    """None (no file), {} and add_bos_token true/false, each alone and with every class."""
    out = [None]
    for cls in [None] + CLASSES:
        for bos in [None, True, False]:
            c = {}
            if cls:
                c["tokenizer_class"] = cls
            if bos is not None:
                c["add_bos_token"] = bos
            out.append(c)
    return out


# The folder linnet's import-llama2c writes (stories15M's SentencePiece tokenizer.model) with
# the tokenizer_config.json proposed for it, and variations around it.
LLAMA2C_CONFIGS = [
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
     "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},  # the one proposed
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
     "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 256},
    {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "legacy": False},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_prefix_space": True},
    {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>",
     "unk_token": "<unk>"},
    {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>",
     "unk_token": "<unk>"},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": None},
    {"tokenizer_class": "LlamaTokenizer", "add_bos_token": False, "bos_token": "<s>"},
]


def cases():
    out = []
    for tok in TOKENIZERS:
        for model_type in ["llama", "qwen2", None]:
            configs = tokenizer_configs() if model_type else [None, {}, {"add_bos_token": True}, {"add_bos_token": False}]
            if model_type == "llama":
                configs += BOS_TOKEN_CONFIGS
            for tc in configs:
                out.append({"tokenizer": tok, "config_json": model_config(model_type), "tokenizer_config": tc})
    for tc in LLAMA2C_CONFIGS:
        out.append({"tokenizer": "sp_stories15M", "config_json": model_config("llama"), "tokenizer_config": tc})
    return out


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def run_case(case, stories, cap):
    from transformers import AutoTokenizer
    src, name = TOKENIZERS[case["tokenizer"]]
    src = os.path.join(stories, src.split(":", 1)[1]) if src.startswith("stories15M:") else os.path.join(ROOT, src)
    d = tempfile.mkdtemp(prefix="bos_case_")
    try:
        shutil.copy(src, os.path.join(d, name))
        if case["tokenizer"] in NO_POST_PROCESSOR:
            with open(os.path.join(d, name)) as f:
                j = json.load(f)
            j["post_processor"] = None
            with open(os.path.join(d, name), "w") as f:
                json.dump(j, f, ensure_ascii=False)
        mc = case["config_json"]
        if mc is not None:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(mc, f)
        if case["tokenizer_config"] is not None:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(case["tokenizer_config"], f)
        logging.Logger.warning_once.cache_clear()  # transformers logs some warnings once per process
        cap.lines.clear()
        res = dict(case)
        with warnings.catch_warnings(record=True) as w, contextlib.redirect_stderr(io.StringIO()) as err:
            warnings.simplefilter("always")
            try:
                t = AutoTokenizer.from_pretrained(d)
                res["class"] = type(t).__name__
                res["bos_token"], res["bos_token_id"] = t.bos_token, t.bos_token_id
                res["eos_token"], res["eos_token_id"] = t.eos_token, t.eos_token_id
                res["unk_token"], res["unk_token_id"] = t.unk_token, t.unk_token_id
                res["texts"] = [{"text": s, "ids": t(s)["input_ids"], "ids_plain": t(s, add_special_tokens=False)["input_ids"]}
                                for s in TEXTS]
                res["error"] = None
            except Exception as e:  # transformers cannot read the folder
                res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        msgs = [str(x.message) for x in w] + cap.lines + [l for l in err.getvalue().splitlines() if l.strip()]
        res["warnings"] = [m.replace(d, "<dir>")[:300] for m in msgs]
        return res
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    import transformers
    transformers.utils.logging.disable_default_handler()  # captured below instead
    stories = stories15m_dir()
    cap = Capture()
    logging.getLogger("transformers").addHandler(cap)
    results = []
    for c in cases():
        if TOKENIZERS[c["tokenizer"]][0].startswith("stories15M:") and not stories:
            sys.exit("stories15M not found (scripts/fetch-stories15M): cannot write every case")
        results.append(run_case(c, stories, cap))
    versions = {"transformers": transformers.__version__, "pinned": PINNED}
    with open(OUT, "w", encoding="utf-8") as f:
        tokenizers = {k: {"source": v[0], "file": v[1], "no_post_processor": k in NO_POST_PROCESSOR}
                      for k, v in TOKENIZERS.items()}
        f.write('{"versions":' + json.dumps(versions) + ',\n"tokenizers":' + json.dumps(tokenizers) + ',\n"cases":[\n')
        f.write(",\n".join(json.dumps(r, ensure_ascii=False) for r in results))
        f.write("\n]}\n")
    print(f"{len(results)} cases -> {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    ensure_venv()
    main()
