#!/usr/bin/env python3
"""Reference fixtures for linnet's logit processors (issue 35), from transformers 5.24's own
LogitsProcessor classes and generate(), written to tests/fixtures/processors/processors.json.

  - "chains": random logits and token histories through transformers' processors and warpers in
    generate's order (SequenceBias, RepetitionPenalty, NoBadWords, MinNewTokensLength, then
    Temperature, TopK, TopP, MinP): the scores each chain leaves (-inf where a token is dropped).
  - "greedy": transformers' greedy generate on the `gqa` golden fixture (a Llama of vocab 256,
    eos 2) with repetition_penalty, sequence_bias, bad_words_ids, min_new_tokens and all of
    them at once: the tokens linnet's engine must produce with the same fields.

Run with tools/golden/.venv's python (make_golden.py creates it):
    tools/golden/.venv/bin/python tools/golden/make_processors.py
Deterministic (seeded generators, one thread).
"""
import json
import os

import torch
from transformers import AutoModelForCausalLM
from transformers.generation.logits_process import (
    LogitsProcessorList, MinNewTokensLengthLogitsProcessor, MinPLogitsWarper, NoBadWordsLogitsProcessor,
    RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
    TopPLogitsWarper)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MODEL = os.path.join(ROOT, "tests", "fixtures", "golden", "gqa")
OUT = os.path.join(ROOT, "tests", "fixtures", "processors", "processors.json")
V, EOS = 256, 2


def chain(p, prompt_len):
    """transformers' processors for linnet's fields `p`, in generate's order."""
    out = []
    if p.get("logit_bias"):
        out.append(SequenceBiasLogitsProcessor({(int(k),): v for k, v in p["logit_bias"].items()}))
    if p.get("repetition_penalty", 1) != 1:
        out.append(RepetitionPenaltyLogitsProcessor(p["repetition_penalty"]))
    if p.get("bad_words_ids"):
        out.append(NoBadWordsLogitsProcessor(p["bad_words_ids"], eos_token_id=EOS))
    if p.get("min_tokens", 0) > 0:
        out.append(MinNewTokensLengthLogitsProcessor(prompt_len, p["min_tokens"], EOS))
    if p.get("temperature", 1) != 1:
        out.append(TemperatureLogitsWarper(p["temperature"]))
    if p.get("top_k", 0) > 0:
        out.append(TopKLogitsWarper(p["top_k"]))
    if p.get("top_p", 1) < 1:
        out.append(TopPLogitsWarper(p["top_p"]))
    if p.get("min_p", 0) > 0:
        out.append(MinPLogitsWarper(p["min_p"]))
    return LogitsProcessorList(out)


def main():
    torch.manual_seed(35)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(35)
    chains = []
    params = [
        {"repetition_penalty": 1.4},
        {"logit_bias": {"3": 2.5, "40": -1.5, "200": 0.75}},
        {"bad_words_ids": [[7], [11, 12], [5, 6, 9]]},
        {"min_tokens": 4},
        {"temperature": 0.7, "top_k": 20},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 0.9, "min_p": 0.1},
        {"logit_bias": {"9": 1.0}, "repetition_penalty": 1.2, "bad_words_ids": [[4], [11, 12]], "min_tokens": 3,
         "temperature": 0.8, "top_k": 50, "top_p": 0.9, "min_p": 0.05},
    ]
    for i, p in enumerate(params):
        for case in range(3):
            prompt_len = 5
            ids = torch.randint(0, 16, (1, prompt_len + case * 2), generator=gen)  # small ids: bad words and repeats hit
            ids[0, -1] = 11 if case == 1 else ids[0, -1]  # a bad word's prefix at the end
            scores = 2.0 * torch.randn(1, V, generator=gen)
            out = chain(p, prompt_len)(ids, scores.clone())
            chains.append({"params": p, "prompt_len": prompt_len, "ids": ids[0].tolist(),
                           "logits": scores[0].tolist(),
                           "expected": [None if not torch.isfinite(x) else float(x) for x in out[0]]})

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = torch.tensor([[1, 17, 42, 99, 3, 250, 7, 7, 64]])
    steps = 16

    def run(**kw):
        with torch.no_grad():
            o = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                               max_new_tokens=steps, pad_token_id=0, **kw)
        return o[0, prompt.shape[1]:].tolist()

    base = run(eos_token_id=None)
    greedy = []

    def case(name, fields, **kw):
        tokens = run(**kw)
        if EOS in tokens:  # generate pads after EOS
            tokens = tokens[:tokens.index(EOS) + 1]
        greedy.append({"name": name, "fields": fields, "tokens": tokens})

    case("repetition_penalty", {"repetition_penalty": 1.5}, eos_token_id=None, repetition_penalty=1.5)
    case("logit_bias", {"logit_bias": {str(base[1]): -5.0, "77": 1.5}}, eos_token_id=None,
         sequence_bias={(base[1],): -5.0, (77,): 1.5})
    bad = [[base[0]], [base[2], base[3]]]
    case("bad_words", {"bad_words_ids": bad}, eos_token_id=None, bad_words_ids=bad)
    case("min_tokens", {"min_tokens": 6, "logit_bias": {str(EOS): 6.0}}, eos_token_id=EOS, min_new_tokens=6,
         sequence_bias={(EOS,): 6.0})
    case("all", {"repetition_penalty": 1.3, "logit_bias": {str(EOS): 3.0, "77": 1.0}, "bad_words_ids": bad,
                 "min_tokens": 5}, eos_token_id=EOS, repetition_penalty=1.3,
         sequence_bias={(EOS,): 3.0, (77,): 1.0}, bad_words_ids=bad, min_new_tokens=5)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"model": "tests/fixtures/golden/gqa", "eos": EOS, "prompt": prompt[0].tolist(), "steps": steps,
                   "greedy_without": base, "greedy": greedy, "chains": chains,
                   "versions": {"transformers": __import__("transformers").__version__,
                                "torch": torch.__version__}}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(chains)} chains, {len(greedy)} greedy runs")
    for g in greedy:
        print(g["name"], g["tokens"], "(without:", base, ")")


if __name__ == "__main__":
    main()
