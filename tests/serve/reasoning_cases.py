"""Reasoning and final content apart (ctest's Serve.reasoning; run by serve_test.py).

The model: tests/fixtures/harmony_chat, a tiny Llama trained to answer three conversations in
the harmony format (gpt-oss's: analysis then final, a function call, a final answer alone;
tools/golden/make_harmony_chat.py), with an o200k-style tokenizer and harmony's special
tokens; canned.json holds what a client must read. The server picks the gpt_oss reasoning
parser from the chat template. The `openai` client reads message.reasoning_content, content
and tool_calls, streaming and not; run-batch writes the same bodies on one rank and on two
shards; --reasoning-parser none gives the plain text back. Then tests/fixtures/qwen3_think_chat
(the same kind of model in Qwen3's `<think>` format) under --reasoning-parser qwen3: thinking,
and with chat_template_kwargs {"enable_thinking": false} all answer.
"""
import json
import os
import subprocess

st = None  # serve_test, set by cases()


def fixture(name="harmony_chat"):
    d = os.path.join(st.SOURCE, "tests", "fixtures", name)
    with open(os.path.join(d, "canned.json"), encoding="utf-8") as f:
        return d, json.load(f)


def extra(obj, key):
    """A field the openai package's types do not declare (they keep what the server sends)."""
    return (obj.model_extra or {}).get(key)


def check_message(name, want, reasoning, content, calls, finish):
    st.check(reasoning == want["reasoning"], f"{name}: reasoning_content {reasoning!r}, want {want['reasoning']!r}")
    st.check(content == want["content"], f"{name}: content {content!r}, want {want['content']!r}")
    st.check(finish == want["finish_reason"], f"{name}: finish_reason {finish!r}, want {want['finish_reason']!r}")
    got = [{"name": c["name"], "arguments": c["arguments"]} for c in calls]
    st.check(got == want["tool_calls"], f"{name}: tool calls {got}, want {want['tool_calls']}")


def conversation_checks(srv, c, canned):
    """Each canned conversation through the openai client, whole and streamed."""
    for conv in canned["conversations"]:
        name = conv["name"]
        kwargs = conv.get("kwargs") or {}
        body = {"extra_body": {"chat_template_kwargs": kwargs}} if kwargs else {}
        # The prompt is transformers' rendering.
        status, t = st.http(srv.base, "POST", "/tokenize",
                            {"model": st.NAME, "messages": conv["messages"], "chat_template_kwargs": kwargs})
        st.check(status == 200 and t["tokens"] == conv["prompt_ids"], f"{name}: prompt ids {t}")
        r = c.chat.completions.create(model=st.NAME, messages=conv["messages"], temperature=0, max_tokens=100, **body)
        m = r.choices[0].message
        calls = [{"name": x.function.name, "arguments": x.function.arguments} for x in (m.tool_calls or [])]
        for x in m.tool_calls or []:
            st.check(x.type == "function" and x.id, f"{name}: tool call {x}")
        check_message(name, conv, extra(m, "reasoning_content"), m.content, calls, r.choices[0].finish_reason)
        st.check(r.usage.completion_tokens == len(conv["output_ids"]), f"{name}: {r.usage}")
        # Streamed: reasoning deltas, then content deltas; a call whole in the last chunk.
        parts = {"reasoning": "", "content": ""}
        order, calls, finish = [], [], None
        for chunk in c.chat.completions.create(model=st.NAME, messages=conv["messages"], temperature=0,
                                               max_tokens=100, stream=True, **body):
            delta = chunk.choices[0].delta
            for key, field in (("reasoning", extra(delta, "reasoning_content")), ("content", delta.content)):
                if field:
                    parts[key] += field
                    if not order or order[-1] != key:
                        order.append(key)
            for x in delta.tool_calls or []:
                calls.append({"name": x.function.name, "arguments": x.function.arguments})
            finish = chunk.choices[0].finish_reason or finish
        check_message(f"{name} (streamed)", conv, parts["reasoning"] or None, parts["content"] or None, calls, finish)
        st.check(order == [k for k in ("reasoning", "content") if conv[k]], f"{name}: streamed in order {order}")


def case_reasoning():
    d, canned = fixture()
    import openai
    with st.Server(checkpoint=d, name="harmony") as srv:
        st.check("chat answers split by the gpt_oss reasoning parser" in srv.tail(100000),
                 "the server did not say it picked the gpt_oss parser")
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none")
        conversation_checks(srv, c, canned)
        # Cut inside the analysis: reasoning only, no content, finish_reason length.
        conv = canned["conversations"][0]
        r = c.chat.completions.create(model=st.NAME, messages=conv["messages"], temperature=0, max_tokens=9)
        m = r.choices[0].message
        st.check(r.choices[0].finish_reason == "length" and m.content is None and
                 conv["reasoning"].startswith(extra(m, "reasoning_content")) and extra(m, "reasoning_content"),
                 f"cut short: {m}")
    # --reasoning-parser none: the text as it was, special tokens skipped.
    with st.Server("--reasoning-parser", "none", checkpoint=d, name="harmony-none") as srv:
        conv = canned["conversations"][0]
        status, body = st.http(srv.base, "POST", "/v1/chat/completions",
                               {"messages": conv["messages"], "temperature": 0, "max_tokens": 100})
        m = body["choices"][0]["message"]
        want = "analysis" + conv["reasoning"] + "assistantfinal" + conv["content"]
        st.check(status == 200 and m["content"] == want and "reasoning_content" not in m, f"parser none: {body}")
    # run-batch: the same messages, on one rank and on two shards.
    src = os.path.join(st.TMP, "harmony-batch.jsonl")
    with open(src, "w") as f:
        for i, conv in enumerate(canned["conversations"]):
            f.write(json.dumps({"custom_id": conv["name"], "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": st.NAME, "messages": conv["messages"], "temperature": 0,
                                         "max_tokens": 100}}) + "\n")
    for label, ranks in (("one", 1), ("tp2", 2)):
        out = os.path.join(st.TMP, f"harmony-batch-{label}.jsonl")
        cmd = [st.LINNET, "run-batch", "--checkpoint", d, "-i", src, "-o", out, "--overwrite", "--backend", "cpu",
               "--served-model-name", st.NAME, "--quiet"]
        if ranks > 1:
            cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", *cmd, "--tp", "2", "--threads", "1"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        st.check(r.returncode == 0, f"run-batch {label}: exit {r.returncode}\n{r.stderr[-3000:]}")
        lines = {x["custom_id"]: x for x in map(json.loads, open(out))}
        for conv in canned["conversations"]:
            choice = lines[conv["name"]]["response"]["body"]["choices"][0]
            m = choice["message"]
            calls = [x["function"] for x in m["tool_calls"]]
            check_message(f"run-batch {label} {conv['name']}", conv, m["reasoning_content"], m["content"], calls,
                          choice["finish_reason"])
    # Qwen3's <think> format under --reasoning-parser qwen3 (no default for it: <think> is not
    # unambiguous), thinking on and off.
    d3, canned3 = fixture("qwen3_think_chat")
    with st.Server("--reasoning-parser", "qwen3", checkpoint=d3, name="qwen3-think") as srv:
        conversation_checks(srv, openai.OpenAI(base_url=srv.base + "/v1", api_key="none"), canned3)
    # A parser asked for by name whose markers the vocabulary lacks: the server does not start,
    # naming the marker. The harmony template's default on such a vocabulary: a warning, no split.
    r = subprocess.run([st.LINNET, "serve", "--checkpoint", d3, "--port", "0", "--backend", "cpu",
                        "--reasoning-parser", "gpt_oss"], capture_output=True, text=True, timeout=120)
    st.check(r.returncode != 0 and "--reasoning-parser gpt_oss: the vocabulary has no token `<|start|>`" in r.stderr,
             f"gpt_oss on Qwen3's vocabulary: exit {r.returncode}\n{r.stderr[-2000:]}")
    with st.Server("--chat-template", os.path.join(d, "chat_template.jinja"), checkpoint=d3, name="harmony-on-qwen3") as srv:
        st.check("the chat template writes the gpt_oss format, but --reasoning-parser gpt_oss: the vocabulary has no "
                 "token `<|start|>`" in srv.tail(100000) and "chat answers are not split" in srv.tail(100000),
                 f"no warning:\n{srv.tail()}")
        status, body = st.http(srv.base, "POST", "/v1/chat/completions",
                               {"messages": canned3["conversations"][0]["messages"], "max_tokens": 4})
        st.check(status == 200 and "reasoning_content" not in body["choices"][0]["message"], f"{body}")
    print(f"reasoning: {len(canned['conversations'])} harmony conversations split into reasoning_content, content and "
          "tool_calls (openai client, streamed and not; run-batch on one rank and two shards); "
          f"{len(canned3['conversations'])} Qwen3 ones, thinking on and off")


def cases(module):
    global st
    st = module
    return {"reasoning": case_reasoning}
