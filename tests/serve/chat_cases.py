"""Conversations against `linnet serve` with real clients, and `linnet run-batch` (ctest's
Serve.chat, Serve.chat-tp2, Serve.chat_lm_eval, Serve.batch; run by serve_test.py).

The model: random weights (`linnet init`) with a real tokenizer and a real chat template.
transformers writes the tokenizer from the Llama 3 vocabulary file that PyPI's
llama-cpp-python 0.3.36 sdist carries (vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf,
the sdist pinned by sha256 in tests/chat_templates/sdist.txt) and the template is the sdist's
Llama 3.1 Instruct one; nothing fetched is committed. The generation config stops at Llama
3.1's three end ids (<|end_of_text|>, <|eom_id|>, <|eot_id|>).
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile

st = None  # serve_test, set by cases()
TEMPLATE = "meta-llama-Llama-3.1-8B-Instruct.jinja"
VOCAB = "ggml-vocab-llama-bpe.gguf"
NAME = None  # the served model's name: serve_test's

# What transformers runs to write the tokenizer, in a process of its own: its GGUF reader
# imports torch for tensors, which a tokenizer never reads and this venv does not have (the
# package is gigabytes): the import gets a stand-in. AutoTokenizer would also read the file's
# model config through torch, so the class is named (PreTrainedTokenizerFast); the
# vocabulary, merges, special tokens and pre-tokenizer come from transformers' own GGUF
# converter. The chat template is set on the tokenizer, so save_pretrained writes it as
# transformers does (chat_template.jinja).
WRITE_TOKENIZER = r"""
import sys, types
from transformers import PreTrainedTokenizerFast
stand_in = types.ModuleType("torch")
stand_in.__getattr__ = lambda name: type(name, (), {})
sys.modules["torch"] = stand_in
models, vocab, template, out = sys.argv[1:5]
tok = PreTrainedTokenizerFast.from_pretrained(models, gguf_file=vocab)
tok.chat_template = open(template, encoding="utf-8").read()
tok.save_pretrained(out)
"""


def sdist_models():
    """vendor/llama.cpp/models of the pinned sdist (its vocab files and templates), extracted
    once into WORK; exits 77 (skipped) with the reason when PyPI cannot be reached."""
    d = os.path.join(st.WORK, "llama-cpp-models")
    if os.path.exists(os.path.join(d, TEMPLATE)):
        return d
    # The sdist is fetched once per build folder (tests/sdist/fetch_sdist.sh, shared with the
    # chat-template tests); 77 passes on as this test's skip.
    r = subprocess.run(["bash", os.path.join(st.SOURCE, "tests/sdist/fetch_sdist.sh"), st.SOURCE,
                        os.path.join(os.path.dirname(st.WORK), "sdist-work")], capture_output=True, text=True, timeout=900)
    if r.returncode == 77:
        print(r.stderr.strip())
        sys.exit(77)
    st.check(r.returncode == 0, f"fetch_sdist.sh failed: {r.stderr[-1000:]}")
    tarball = [r.stdout.strip()]
    tmp = d + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with tarfile.open(tarball[0]) as t:
        for m in t.getmembers():
            name = os.path.basename(m.name)
            if "/vendor/llama.cpp/models/" in m.name and m.isfile() and (name == VOCAB or name == TEMPLATE):
                with t.extractfile(m) as src, open(os.path.join(tmp, name), "wb") as dst:
                    shutil.copyfileobj(src, dst)
    st.check(os.path.exists(os.path.join(tmp, TEMPLATE)) and os.path.exists(os.path.join(tmp, VOCAB)),
             "the sdist lacks the vocab file or the template")
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)
    return d


def chat_model():
    """The checkpoint (made once per build folder)."""
    d = os.path.join(st.WORK, "chat-model")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return d
    models = sdist_models()
    tmp = d + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([sys.executable, "-c", WRITE_TOKENIZER, models, VOCAB, os.path.join(models, TEMPLATE), tmp],
                       capture_output=True, text=True, timeout=300)
    st.check(r.returncode == 0, f"transformers could not write the tokenizer: {r.stderr[-3000:]}")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
              "bos_token_id": 128000, "eos_token_id": 128009, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    json.dump(config, open(os.path.join(tmp, "config.json"), "w"), indent=1)
    json.dump({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]},
              open(os.path.join(tmp, "generation_config.json"), "w"))
    subprocess.run([st.LINNET, "init", "--config", os.path.join(tmp, "config.json"), "--out", tmp, "--seed", "1"],
                   check=True, capture_output=True, timeout=300)
    try:
        os.rename(tmp, d)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another case made it first
    return d


CONVERSATIONS = {
    "hello": [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Hi there"}],
    "turns": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "  Blue.\n"},
              {"role": "user", "content": "And another?"}],
    "unicode": [{"role": "user", "content": "Grüße, 世界 🌍 — \"quotes\" <tags> é"}],
    # Text parts: Llama 3.1's template reads content as a string, so they are joined (vLLM's "string" format).
    "parts": [{"role": "user", "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second."}]}],
}


def joined(messages):
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        out.append(m)
    return out


def rendered(checkpoint, messages, *extra):
    """`linnet apply-chat-template`'s text and ids for a conversation."""
    path = os.path.join(st.TMP, "messages.json")
    json.dump(messages, open(path, "w"))
    args = [st.LINNET, "apply-chat-template", "--checkpoint", checkpoint, "--messages", path, *extra]
    text = subprocess.run(args, capture_output=True, check=True, timeout=120).stdout.decode()
    ids = [int(x) for x in subprocess.run(args + ["--ids"], capture_output=True, text=True, check=True,
                                          timeout=120).stdout.split()]
    return text, ids


def generate_texts(checkpoint, lines, *extra):
    """`linnet generate` on text lines (the rendered conversations), BOS not added (the text has it)."""
    src, dst = os.path.join(st.TMP, "chat-prompts.jsonl"), os.path.join(st.TMP, "chat-generated.jsonl")
    with open(src, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    r = subprocess.run([st.LINNET, "generate", "--checkpoint", checkpoint, "--prompts", src, "--output", dst,
                        "--overwrite", "--backend", "cpu", "--quiet", "--add-bos", "no", *extra],
                       capture_output=True, text=True, timeout=600)
    st.check(r.returncode == 0, f"linnet generate failed: {r.stderr[-2000:]}")
    return {j["id"]: j for j in map(json.loads, open(dst))}


def requests():
    """(id, conversation, sampling) of the chat checks: greedy, sampled and seeded, stop strings."""
    out = []
    for name, conv in CONVERSATIONS.items():
        out.append((f"{name}-greedy", conv, dict(max_tokens=12, temperature=0)))
        out.append((f"{name}-sampled", conv, dict(max_tokens=12, temperature=0.9, top_p=0.95, seed=7)))
    out.append(("stop", CONVERSATIONS["hello"], dict(max_tokens=24, temperature=1.0, seed=11, stop=["a", "e"])))
    return out


def wanted(checkpoint, reqs):
    """What `linnet generate` gives on each request's rendered text."""
    lines = []
    for rid, conv, s in reqs:
        text, _ = rendered(checkpoint, joined(conv))
        line = {"id": rid, "text": text, "max_new_tokens": s["max_tokens"], "temperature": s["temperature"]}
        for k in ("seed", "top_p", "stop"):
            if k in s:
                line[k] = s[k]
        lines.append(line)
    return generate_texts(checkpoint, lines)


def same(rid, want, text, finish, tokens):
    st.check(text == want["text"], f"{rid}: {text!r} != generate's {want['text']!r}")
    st.check(finish == want["finish_reason"], f"{rid}: finish_reason {finish} != generate's {want['finish_reason']}")
    st.check(tokens == want["completion_tokens"], f"{rid}: {tokens} tokens != generate's {want['completion_tokens']}")


def chat_checks(srv, checkpoint, streams=True):
    import openai
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    reqs = requests()
    want = wanted(checkpoint, reqs)
    for rid, conv, s in reqs:
        r = c.chat.completions.create(model=NAME, messages=conv, **s)
        ch = r.choices[0]
        st.check(r.object == "chat.completion" and ch.message.role == "assistant", f"{rid}: {r}")
        same(rid, want[rid], ch.message.content, ch.finish_reason, r.usage.completion_tokens)
        st.check(r.usage.prompt_tokens == want[rid]["prompt_tokens"], f"{rid}: prompt tokens")
    st.check(any(w["finish_reason"] == "stop" for w in want.values()), "no request stopped at a stop string")
    if streams:
        # Streaming: the role first, then the content in pieces; the last says why it ended.
        for rid, conv, s in reqs[:5]:
            chunks = list(c.chat.completions.create(model=NAME, messages=conv, stream=True,
                                                    stream_options={"include_usage": True}, **s))
            st.check(chunks[0].object == "chat.completion.chunk" and chunks[0].choices[0].delta.role == "assistant",
                     f"{rid}: first chunk {chunks[0]}")
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            ends = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
            usage = [ch.usage for ch in chunks if ch.usage]
            st.check(len(ends) == 1 and len(usage) == 1, f"{rid}: {len(ends)} finishing chunks, {len(usage)} usage chunks")
            same(rid, want[rid], text, ends[0], usage[0].completion_tokens)
    return c, want


def case_chat():
    d = chat_model()
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(d)
    # The prompt: linnet's rendering and ids are transformers' apply_chat_template's.
    for name, conv in CONVERSATIONS.items():
        text, ids = rendered(d, joined(conv))
        want = hf.apply_chat_template(joined(conv), tokenize=False, add_generation_prompt=True)
        st.check(text == want, f"{name}: apply-chat-template {text!r} != transformers' {want!r}")
        want_ids = hf.apply_chat_template(joined(conv), tokenize=True, add_generation_prompt=True, return_dict=True)
        st.check(ids == list(want_ids["input_ids"]), f"{name}: ids differ from transformers'")
    with st.Server(checkpoint=d, name="chat") as srv:
        c, want = chat_checks(srv, d)
        import openai
        # /tokenize and /detokenize as vLLM shapes them: the ids apply-chat-template gives.
        _, ids = rendered(d, joined(CONVERSATIONS["turns"]))
        status, t = st.http(srv.base, "POST", "/tokenize", {"model": NAME, "messages": CONVERSATIONS["turns"]})
        st.check(status == 200 and t["tokens"] == ids and t["count"] == len(ids) and t["max_model_len"] == 512, t)
        status, t2 = st.http(srv.base, "POST", "/detokenize", {"model": NAME, "tokens": ids})
        st.check(status == 200 and t2["prompt"] == rendered(d, joined(CONVERSATIONS["turns"]))[0], t2)
        status, t3 = st.http(srv.base, "POST", "/tokenize", {"prompt": "Hello world", "return_token_strs": True})
        st.check(status == 200 and t3["tokens"] == hf("Hello world")["input_ids"] and t3["token_strs"] == ["Hello", " world"], t3)
        # Log-probabilities in the chat shape: a greedy token is its position's likeliest.
        r = c.chat.completions.create(model=NAME, messages=CONVERSATIONS["hello"], max_tokens=6, temperature=0,
                                      logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs.content
        st.check(len(lp) == r.usage.completion_tokens, f"{len(lp)} logprobs for {r.usage.completion_tokens} tokens")
        for e in lp:
            st.check(len(e.top_logprobs) == 3 and e.logprob == e.top_logprobs[0].logprob and
                     e.token == e.top_logprobs[0].token and bytes(e.bytes) == e.token.encode(), f"logprobs entry {e}")
        st.check("".join(e.token for e in lp) == r.choices[0].message.content, "logprob tokens spell the content")
        # n samples, seeded: they differ, and the same seed gives them again.
        a = c.chat.completions.create(model=NAME, messages=CONVERSATIONS["hello"], max_tokens=8, temperature=1.0, n=3, seed=5)
        b = c.chat.completions.create(model=NAME, messages=CONVERSATIONS["hello"], max_tokens=8, temperature=1.0, n=3, seed=5)
        st.check([x.message.content for x in a.choices] == [x.message.content for x in b.choices], "seeded n samples")
        st.check(len({x.message.content for x in a.choices}) > 1, "n samples differ")
        # continue_final_message and chat_template_kwargs (vLLM's), through extra_body.
        prefix = CONVERSATIONS["hello"] + [{"role": "assistant", "content": "Sure, here"}]
        r = c.chat.completions.create(model=NAME, messages=prefix, max_tokens=4, temperature=0,
                                      extra_body={"continue_final_message": True, "add_generation_prompt": False})
        text, _ = rendered(d, prefix, "--continue-final-message")
        st.check(text.endswith("Sure, here"), f"continued: {text[-40:]!r}")
        want_c = generate_texts(d, [{"id": "c", "text": text, "max_new_tokens": 4}])["c"]
        same("continue", want_c, r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens)
        kwargs = {"date_string": "01 Jan 2030"}  # a variable the template reads
        r = c.chat.completions.create(model=NAME, messages=CONVERSATIONS["hello"], max_tokens=4, temperature=0,
                                      extra_body={"chat_template_kwargs": kwargs})
        text, ids = rendered(d, CONVERSATIONS["hello"], "--kwargs", json.dumps(kwargs))
        st.check("Today Date: 01 Jan 2030" in text, f"kwargs: {text!r}")
        st.check(ids == hf.apply_chat_template(CONVERSATIONS["hello"], tokenize=True, add_generation_prompt=True,
                                               return_dict=True, **kwargs)["input_ids"], "kwargs: ids differ from transformers'")
        want_k = generate_texts(d, [{"id": "k", "text": text, "max_new_tokens": 4}])["k"]
        same("kwargs", want_k, r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens)
        # Refused by name, never ignored; the template's own raise_exception is the 400's message.
        two_calls = CONVERSATIONS["hello"] + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}]
        for kwargs, param, words in [
                (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), "tools", "not supported"),
                (dict(response_format={"type": "json_object"}), "response_format", "not supported"),
                (dict(logit_bias={"999999999": 1}), "logit_bias", "999999999"),
                (dict(frequency_penalty=5), "frequency_penalty", "frequency_penalty"),
                (dict(extra_body={"use_beam_search": True}), "use_beam_search", "not supported"),
                (dict(messages=[]), "messages", "non-empty list"),
                (dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
                 "messages", "`messages[0].content[0].type` = \"image_url\" is not supported"),
                (dict(messages=two_calls), "messages", "This model only supports single tool-calls at once!"),
                (dict(max_tokens=10 ** 6), "max_tokens", "exceeds MaxSeq = 512"),
                (dict(extra_body={"continue_final_message": True, "add_generation_prompt": True}), "continue_final_message",
                 "cannot both be true")]:
            kwargs.setdefault("messages", CONVERSATIONS["hello"])
            try:
                c.chat.completions.create(model=NAME, **kwargs)
                raise AssertionError(f"{param}: accepted")
            except openai.BadRequestError as err:
                body = err.body if isinstance(err.body, dict) else {}
                st.check(words in str(err) and body.get("param") == param, f"{param}: {err}")
        # A model whose generation config stops at the token this one writes first: it stops there.
        stopper = os.path.join(st.TMP, "chat-stopper")
        shutil.rmtree(stopper, ignore_errors=True)
        os.makedirs(stopper)
        for f in os.listdir(d):
            os.symlink(os.path.join(d, f), os.path.join(stopper, f))
        first_id = generate_texts(d, [{"id": "x", "text": rendered(d, CONVERSATIONS["hello"])[0], "max_new_tokens": 1}])["x"]["tokens"][0]
        os.remove(os.path.join(stopper, "generation_config.json"))
        json.dump({"eos_token_id": [128001, 128008, 128009, first_id]}, open(os.path.join(stopper, "generation_config.json"), "w"))
        st.check(first_id not in (128001, 128008, 128009), "the first token is already an end id")
        srv.proc.send_signal(signal.SIGTERM)
        st.check(srv.wait() == 0, "exit 0 after SIGTERM")
    with st.Server(checkpoint=stopper, name="chat-stopper") as srv:
        r = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0).chat.completions.create(
            model=NAME, messages=CONVERSATIONS["hello"], max_tokens=12, temperature=0)
        st.check(r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1 and r.choices[0].message.content == "",
                 f"generation_config's EOS ids: {r}")
    # A model without a chat template answers chat with the reason.
    with st.Server(name="no-template") as srv:
        status, body = st.http(srv.base, "POST", "/v1/chat/completions", {"messages": CONVERSATIONS["hello"]})
        st.check(status == 400 and "no chat template" in body["error"]["message"] and
                 "--chat-template" in body["error"]["message"], f"{status} {body}")
    print("chat: the openai client's chat completions (whole and streamed) equal linnet generate's on the rendered "
          "text; the rendered text and ids equal transformers'")


def case_chat_tp2():
    """The same requests across ranks: two shards under mpirun, equal to one rank's generate."""
    d = chat_model()
    with st.Server(checkpoint=d, ranks=2, tp=2, name="chat-tp2") as srv:
        chat_checks(srv, d)
        os.kill(srv.rank_pid(0), signal.SIGTERM)
        st.check(srv.wait() == 0, f"exit 0 after SIGTERM; log:\n{srv.tail()}")
    print("chat-tp2: chat completions across two shards equal one rank's linnet generate")


def case_chat_lm_eval():
    """lm-eval's local-chat-completions with --apply_chat_template on a small generate_until task:
    each answer equals linnet generate's on the conversation lm-eval sent (sampled, seeded as lm-eval seeds)."""
    d = chat_model()
    tasks = os.path.join(st.TMP, "tasks")
    os.makedirs(tasks, exist_ok=True)
    docs = [{"question": q, "answer": a} for q, a in [("What is two plus two?", "4"), ("Name a red fruit.", "apple"),
                                                      ("Say hello in French.", "bonjour"), ("What colour is the sky?", "blue"),
                                                      ("Count to three.", "1 2 3"), ("Capital of Italy?", "Rome")]]
    with open(os.path.join(tasks, "chat_gen.jsonl"), "w") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
    with open(os.path.join(tasks, "chat_gen.yaml"), "w") as f:
        f.write(f"task: chat_gen\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tasks}/chat_gen.jsonl\n"
                "test_split: test\noutput_type: generate_until\ndoc_to_text: \"{{question}}\"\ndoc_to_target: answer\n"
                "generation_kwargs:\n  until: [\"e\"]\n  max_gen_toks: 12\n  temperature: 0.8\n  do_sample: true\n"
                "metric_list:\n  - metric: exact_match\nmetadata:\n  version: 1.0\n")
    out = os.path.join(st.TMP, "lm_eval_chat_out")
    shutil.rmtree(out, ignore_errors=True)
    with st.Server(checkpoint=d, name="chat-lm-eval") as srv:
        args = f"model={NAME},base_url={srv.base}/v1/chat/completions,num_concurrent=2,max_retries=1"
        r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "lm_eval"), "--model", "local-chat-completions",
                            "--model_args", args, "--apply_chat_template", "--tasks", "chat_gen", "--include_path", tasks,
                            "--log_samples", "--output_path", out], cwd=st.TMP, capture_output=True, text=True, timeout=600)
        st.check(r.returncode == 0, f"lm_eval failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    samples = [json.loads(x) for f in glob.glob(os.path.join(out, "**", "samples_chat_gen_*.jsonl"), recursive=True)
               for x in open(f)]
    st.check(len(samples) == len(docs), f"{len(samples)} samples")
    lines, got = [], {}
    for s in samples:
        arg = s["arguments"]["gen_args_0"]["arg_0"]  # the conversation as a JSON string (in a list)
        if isinstance(arg, list) and len(arg) == 1 and isinstance(arg[0], str):
            arg = arg[0]
        messages = json.loads(arg) if isinstance(arg, str) else arg
        st.check(isinstance(messages, list) and messages[-1]["content"] == s["doc"]["question"], f"sent {arg!r}")
        text, _ = rendered(d, messages)
        rid = str(s["doc_id"])
        # lm-eval's request: temperature and seed 1234 in the body, its until as stop strings.
        lines.append({"id": rid, "text": text, "max_new_tokens": 12, "temperature": 0.8, "seed": 1234, "stop": ["e"]})
        got[rid] = s["resps"][0][0]
    want = generate_texts(d, lines)
    for rid, text in got.items():
        st.check(text == want[rid]["text"], f"doc {rid}: lm-eval got {text!r}, linnet generate {want[rid]['text']!r}")
    print(f"chat_lm_eval: lm-eval local-chat-completions --apply_chat_template: {len(got)} generate_until answers "
          "equal linnet generate's on the rendered conversations")


def batch_lines():
    """A mixed batch file: chat and completions, greedy and seeded, n, logprobs, and bad lines."""
    lines = []
    for i, (rid, conv, s) in enumerate(requests()):
        body = {"model": NAME, "messages": conv, **s}
        if i % 3 == 1:
            body.update(n=2, seed=s.get("seed", 0) + 1, temperature=1.0)
        if i % 4 == 2:
            body.update(logprobs=True, top_logprobs=2)
        lines.append({"custom_id": f"chat-{rid}", "method": "POST", "url": "/v1/chat/completions", "body": body})
    for i, p in enumerate(["Once upon a time", "The cat sat on", "Hello"]):
        body = {"model": NAME, "prompt": p, "max_tokens": 8, "temperature": 0.7 if i else 0, "seed": 3 + i}
        if i == 2:
            body.update(echo=True, logprobs=2, max_tokens=3)
        lines.append({"custom_id": f"text-{i}", "method": "POST", "url": "/v1/completions", "body": body})
    bad = [
        {"custom_id": "bad-tools", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": CONVERSATIONS["hello"], "tools": [{"type": "function", "function": {"name": "f"}}]}},
        {"custom_id": "bad-url", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
        {"custom_id": "bad-empty", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}},
    ]
    return lines, bad


def case_batch():
    """run-batch answers each line with the body the server answers the same request with: on
    one rank, on two shards and on two replicas; bad lines are error lines with their custom_id."""
    d = chat_model()
    good, bad = batch_lines()
    src = os.path.join(st.TMP, "batch.jsonl")
    with open(src, "w") as f:
        for line in good[:4] + bad[:1] + good[4:] + bad[1:]:
            f.write(json.dumps(line) + "\n")
        f.write("{not json\n")
    runs = {}
    for label, ranks, tp in [("one", 1, 1), ("tp2", 2, 2), ("replicas", 2, 1)]:
        out = os.path.join(st.TMP, f"batch-{label}.jsonl")
        cmd = [st.LINNET, "run-batch", "--checkpoint", d, "-i", src, "-o", out, "--overwrite", "--backend", "cpu",
               "--served-model-name", NAME, "--quiet"]
        if ranks > 1:
            cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", *cmd, "--tp", str(tp), "--threads", "1"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        st.check(r.returncode == 3, f"run-batch {label}: exit {r.returncode} (3: some lines failed)\n{r.stderr[-3000:]}")
        runs[label] = [json.loads(x) for x in open(out)]
        st.check(len(runs[label]) == len(good) + len(bad) + 1, f"{label}: {len(runs[label])} lines")
    by_id = {x["custom_id"]: x for x in runs["one"]}
    for b in bad:
        e = by_id[b["custom_id"]]
        st.check(e["error"] is not None and e["error"]["message"], f"{b['custom_id']}: {e}")
    st.check(runs["one"][-1]["custom_id"] == len(good) + len(bad) + 1 and "malformed JSON" in runs["one"][-1]["error"]["message"],
             f"the unreadable line: {runs['one'][-1]}")
    # The server's answers to the same bodies.
    with st.Server(checkpoint=d, name="batch") as srv:
        for line in good:
            status, body = st.http(srv.base, "POST", line["url"], line["body"], timeout=120)
            st.check(status == 200, f"{line['custom_id']}: {status} {body}")
            mine = by_id[line["custom_id"]]
            st.check(mine["error"] is None and mine["response"]["status_code"] == 200, f"{line['custom_id']}: {mine}")
            got = mine["response"]["body"]
            st.check(got["object"] == body["object"] and got["usage"] == body["usage"], f"{line['custom_id']}: usage")
            for a, b in zip(got["choices"], body["choices"]):
                content = (lambda c: c["message"]["content"] if "message" in c else c["text"])
                st.check(content(a) == content(b) and a["finish_reason"] == b["finish_reason"],
                         f"{line['custom_id']}: run-batch {content(a)!r} vs the server's {content(b)!r}")
                st.check((a["logprobs"] is None) == (b["logprobs"] is None), f"{line['custom_id']}: logprobs")
        for b in bad:
            status, body = st.http(srv.base, "POST", b["url"], b["body"])
            if b["custom_id"] != "bad-url":
                st.check(by_id[b["custom_id"]]["response"]["status_code"] == status and
                         by_id[b["custom_id"]]["response"]["body"] == body, f"{b['custom_id']}: {status} {body}")
    # Two ranks: the same answers (tokens and text; log-probabilities to 1e-5).
    def close(a, b, what):
        if isinstance(a, dict):
            st.check(isinstance(b, dict) and a.keys() == b.keys(), what)
            for k in a:
                if k != "created":
                    close(a[k], b[k], f"{what}.{k}")
        elif isinstance(a, list):
            st.check(isinstance(b, list) and len(a) == len(b), what)
            for i, (x, y) in enumerate(zip(a, b)):
                close(x, y, f"{what}[{i}]")
        elif isinstance(a, float):
            st.check(isinstance(b, float) and abs(a - b) <= 1e-5, f"{what}: {a} vs {b}")
        else:
            st.check(a == b, f"{what}: {a!r} vs {b!r}")
    for label in ("tp2", "replicas"):
        for a, b in zip(runs["one"], runs[label]):
            close(a, b, f"{label}:{a['custom_id']}")
    print(f"batch: {len(good)} requests answered as the server answers them, {len(bad) + 1} bad lines as error lines; "
          "the same file on two shards and on two replicas")


def cases(module):
    global st, NAME
    st, NAME = module, module.NAME
    return {"chat": case_chat, "chat-tp2": case_chat_tp2, "chat_lm_eval": case_chat_lm_eval, "batch": case_batch}
