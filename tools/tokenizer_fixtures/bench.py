#!/usr/bin/env python3
"""Encode speed, single-threaded: linnet (`linnet tokenize --bench`) against the Python
reference libraries on the same text and the same tokenizer files.

    python3 tools/tokenizer_fixtures/bench.py [--text FILE] [--linnet build/linnet]

Without --text, writes /tmp/linnet_tok_bench.txt: the vim documentation
(/usr/share/vim/vim*/doc/*.txt, sorted), ~8 MB of English prose, tables and code.
Uses the venv of make_fixtures.py (creating it if needed). Prints a Markdown table.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # tokenizers: one thread
os.environ["TOKENIZERS_PARALLELISM"] = "false"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
sys.path.insert(0, HERE)
from make_fixtures import LLAMA3_PATTERN, ensure_venv, stories15m_dir  # noqa: E402
STORIES = stories15m_dir()


def make_text(path, limit=8_000_000):
    parts, n = [], 0
    for f in sorted(glob.glob("/usr/share/vim/vim*/doc/*.txt")):
        with open(f, "rb") as fh:
            b = fh.read()
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        parts.append(b)
        n += len(b)
        if n >= limit:
            break
    if not parts:
        sys.exit("no /usr/share/vim/vim*/doc/*.txt here: pass --text FILE")
    with open(path, "wb") as fh:
        fh.write(b"".join(parts))


def best_of(fn, seconds=3.0):
    best, t_all, out = 1e30, time.perf_counter(), None
    while True:
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - t_all >= seconds:
            return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text")
    ap.add_argument("--linnet", default=os.path.join(ROOT, "build", "linnet"))
    args = ap.parse_args()
    path = args.text or "/tmp/linnet_tok_bench.txt"
    if not args.text:
        make_text(path)
    with open(path, "rb") as fh:
        data = fh.read()
    text = data.decode("utf-8")
    mb = len(data) / 1e6

    from tokenizers import Tokenizer
    import sentencepiece as spm
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    rows = []

    lines = text.split("\n")

    def linnet(ckpt, per_line):
        out = subprocess.run([args.linnet, "tokenize", "--checkpoint", ckpt, "--bench", path]
                             + (["--bench-lines"] if per_line else []),
                             check=True, capture_output=True, text=True).stdout
        m = re.search(r"-> (\d+) tokens; best of \d+ runs ([\d.]+) s", out)
        return int(m.group(1)), float(m.group(2))

    cases = []
    for name in ["hf_bytelevel", "hf_spbpe"]:
        tok = Tokenizer.from_file(os.path.join(FIX, name, "tokenizer.json"))
        cases.append((f"tokenizer.json {name}", "tokenizers " + __import__("tokenizers").__version__,
                      lambda s, tok=tok: len(tok.encode(s, add_special_tokens=False).ids), os.path.join(FIX, name)))
    ranks = load_tiktoken_bpe(os.path.join(FIX, "tiktoken_gpt2", "tokenizer.model"))
    enc = tiktoken.Encoding("gpt2_llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|begin_of_text|>": len(ranks)})
    cases.append(("tiktoken gpt2 ranks, Llama 3 pattern", "tiktoken " + tiktoken.__version__,
                  lambda s: len(enc.encode_ordinary(s)), os.path.join(FIX, "tiktoken_gpt2")))
    if os.path.exists(os.path.join(STORIES, "tokenizer.model")):
        sp = spm.SentencePieceProcessor(model_file=os.path.join(STORIES, "tokenizer.model"))
        cases.append(("stories15M tokenizer.model (SentencePiece)", "sentencepiece " + spm.__version__,
                      lambda s: len(sp.encode(s)), STORIES))

    print(f"text: {path}, {len(data)} bytes\n")
    print("| tokenizer | input | reference | reference MB/s | linnet MB/s | tokens (ref / linnet) |")
    print("|---|---|---|---|---|---|")
    for per_line in (True, False):
        for label, ref, fn, ckpt in cases:
            if per_line:
                t_ref, n_ref = best_of(lambda: sum(fn(s) for s in lines))
            else:
                t_ref, n_ref = best_of(lambda: fn(text))
            n_lin, t_lin = linnet(ckpt, per_line)
            print(f"| {label} | {'line by line' if per_line else 'whole text'} | {ref} | {mb / t_ref:.2f} | "
                  f"{mb / t_lin:.2f} | {n_ref} / {n_lin} |", flush=True)


if __name__ == "__main__":
    ensure_venv(__file__)
    main()
