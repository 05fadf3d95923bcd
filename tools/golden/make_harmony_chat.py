#!/usr/bin/env python3
"""Writes tests/fixtures/harmony_chat/ and tests/fixtures/qwen3_think_chat/: tiny Llamas that
answer a few conversations in the harmony format (gpt-oss's) and in Qwen3's `<think>` format,
for the reasoning parsers' end-to-end tests (Serve.harmony: the `openai` client reads
reasoning_content, content and tool_calls, streaming and not; run-batch writes the same).

- The tokenizer: the hf_bytelevel fixture's BPE (tests/fixtures/tokenizers) with o200k's
  pre-tokenizer (the Split regex and ByteLevel without its own, as gpt-oss's tokenizer.json
  has them), no BOS template, and harmony's special tokens, saved by transformers 5.24
  (tokenizer.json, tokenizer_config.json, chat_template.jinja).
- The chat templates: harmony's message layout without gpt-oss's system preamble (whose date
  changes daily): `<|start|>ROLE<|message|>TEXT<|end|>`, then `<|start|>assistant`; and
  Qwen3's ChatML with its enable_thinking switch (false writes an empty think block into the
  prompt), without its tool and history branches. qwen3_think_chat ends at <|im_end|>.
- The model: LlamaForCausalLM (2 layers, hidden 64) trained here until greedy decoding writes
  each canned answer; it is then checked with transformers' generate (eos: <|return|> and
  <|call|>, as gpt-oss's generation_config.json) and every step's margin between the first and
  second logit is printed (linnet must pick the same token).
- canned.json: the conversations, the answer's raw text, what a client must read
  (reasoning, content, tool calls), and the prompt ids transformers renders.

Runs in tools/golden's venv (torch, transformers), as make_golden.py:
    tools/golden/.venv/bin/python tools/golden/make_harmony_chat.py [harmony_chat | qwen3_think_chat]
torch runs on one CPU thread with a fixed seed, so re-running reproduces the same files.
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HARMONY = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
           "<|message|>", "<|call|>"]
TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{%- else -%}"
    "<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}")

CONVERSATIONS = [
    {"name": "sum",
     "messages": [{"role": "user", "content": "What is 2 + 2?"}],
     "output": "<|channel|>analysis<|message|>The user asks for a sum. 2 + 2 = 4.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>2 + 2 is 4.<|return|>",
     "reasoning": "The user asks for a sum. 2 + 2 = 4.", "content": "2 + 2 is 4.", "tool_calls": [],
     "finish_reason": "stop"},
    {"name": "weather",
     "messages": [{"role": "user", "content": "Weather in Paris?"}],
     "output": "<|channel|>analysis<|message|>Call get_weather.<|end|>"
               "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               "{\"city\": \"Paris\"}<|call|>",
     "reasoning": "Call get_weather.", "content": None,
     "tool_calls": [{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}], "finish_reason": "tool_calls"},
    {"name": "greeting",
     "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
     "output": "<|channel|>final<|message|>Hi! What can I do for you today?<|return|>",
     "reasoning": None, "content": "Hi! What can I do for you today?", "tool_calls": [], "finish_reason": "stop"},
]
QWEN3_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
QWEN3_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}")
QWEN3_CONVERSATIONS = [
    {"name": "thinking",
     "messages": [{"role": "user", "content": "What is 3 + 4?"}], "kwargs": {},
     "output": "<think>\nAdd them: 3 + 4 = 7.\n</think>\n\n3 + 4 is 7.<|im_end|>",
     "reasoning": "\nAdd them: 3 + 4 = 7.\n", "content": "\n\n3 + 4 is 7.", "tool_calls": [],
     "finish_reason": "stop"},
    {"name": "not thinking",
     "messages": [{"role": "user", "content": "What is 3 + 4?"}], "kwargs": {"enable_thinking": False},
     "output": "It is 7.<|im_end|>",
     "reasoning": None, "content": "It is 7.", "tool_calls": [], "finish_reason": "stop"},
]
FIXTURES = {
    "harmony_chat": {"specials": HARMONY, "template": TEMPLATE, "conversations": CONVERSATIONS,
                     "eos": ["<|return|>", "<|call|>"]},
    "qwen3_think_chat": {"specials": QWEN3_SPECIALS, "template": QWEN3_TEMPLATE, "conversations": QWEN3_CONVERSATIONS,
                         "eos": ["<|im_end|>"]},
}
TOKENIZER_TEXTS = [
    "Hello world", "It's 2025: don't WORRY, we'll see 12345 items!", "ÅNGSTRÖM straße ÉCOLE naïve",
    "x<|channel|>analysis<|message|>think<|end|><|start|>assistant", "tabs\tand\n\nnewlines  \n end",
    "CamelCaseWords and snake_case_words", "数字123和中文", "emoji 🌍🙂 done",
]


def main(name):
    import torch
    from tokenizers import Regex, Tokenizer, pre_tokenizers, processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    torch.set_num_threads(1)
    base = Tokenizer.from_file(os.path.join(ROOT, "tests/fixtures/tokenizers/hf_bytelevel/tokenizer.json"))
    base.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    base.post_processor = processors.ByteLevel(trim_offsets=False)
    spec = FIXTURES[name]
    out_dir = os.path.join(ROOT, "tests", "fixtures", name)
    conversations = spec["conversations"]
    tok = PreTrainedTokenizerFast(tokenizer_object=base, eos_token=spec["eos"][0], pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": spec["specials"]})
    tok.chat_template = spec["template"]
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    tok.save_pretrained(out_dir)
    tok = PreTrainedTokenizerFast.from_pretrained(out_dir)
    eos = [tok.convert_tokens_to_ids(e) for e in spec["eos"]]

    pairs = []
    for c in conversations:
        kwargs = c.get("kwargs", {})
        prompt = tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=True, return_dict=True,
                                         **kwargs)
        prompt = list(prompt["input_ids"])
        answer = tok(c["output"], add_special_tokens=False)["input_ids"]
        assert tok.decode(answer) == c["output"], c["name"]
        c["prompt_ids"] = prompt
        c["prompt_text"] = tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=False, **kwargs)
        c["output_ids"] = answer
        pairs.append((prompt, answer))

    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                      bos_token_id=None, eos_token_id=eos, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).float()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(600):
        opt.zero_grad()
        loss = 0.0
        for prompt, answer in pairs:
            ids = torch.tensor([prompt + answer])
            labels = torch.tensor([[-100] * len(prompt) + answer])
            loss = loss + model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    model.eval()
    worst = float("inf")
    with torch.no_grad():
        for c, (prompt, answer) in zip(conversations, pairs):
            out = model.generate(torch.tensor([prompt]), max_new_tokens=len(answer) + 8, do_sample=False,
                                 eos_token_id=eos, pad_token_id=tok.pad_token_id)
            got = out[0, len(prompt):].tolist()
            assert got == answer, f"{c['name']}: greedy {tok.decode(got)!r}"
            logits = model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1:-1]
            top2 = logits.topk(2, dim=-1).values
            margin = (top2[:, 0] - top2[:, 1]).min().item()
            worst = min(worst, margin)
            print(f"{c['name']}: {len(answer)} tokens written greedily; smallest margin {margin:.3f}")
    model.save_pretrained(out_dir, safe_serialization=True)
    model.generation_config.save_pretrained(out_dir)
    ids = [{"text": t, "ids": tok(t, add_special_tokens=False)["input_ids"]} for t in TOKENIZER_TEXTS]
    with open(os.path.join(out_dir, "canned.json"), "w", encoding="utf-8") as f:
        json.dump({"note": "made by tools/golden/make_harmony_chat.py", "smallest_margin": round(worst, 3),
                   "conversations": conversations, "tokenizer_cases": ids}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for fn in sorted(os.listdir(out_dir)):
        print(f"{os.path.getsize(os.path.join(out_dir, fn)):>9}  {fn}")


if __name__ == "__main__":
    for name in sys.argv[1:] or list(FIXTURES):
        main(name)
