"""`linnet serve` with real clients: the `openai` package, lm-evaluation-harness's
local-completions, a load of 500 concurrent requests, faults. Run by serve_test.sh (ctest's
Serve.* cases) as: serve_test.py CASE LINNET SOURCE WORK. Loopback only; every wait bounded.

Cases: openai, lm_eval, load, faults, clients, body_limits, slow_clients, operators (one rank); load-tp2, faults-tp2 (mpirun -np 2, Shards
2); replicas (mpirun -np 2, two replicas of one shard); stories15M (the real model); chat,
chat-tp2, chat_lm_eval, batch (conversations and batch files: tests/serve/chat_cases.py).
"""
import asyncio
import glob
import json
import os
import queue
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

CASE, LINNET, SOURCE, WORK = sys.argv[1:5]
FIXTURE = os.path.join(SOURCE, "tests/fixtures/lm_eval")
MODEL = os.path.join(FIXTURE, "model")  # vocab 1398, MaxSeq 64, with an HF tokenizer
NAME = "tiny"
TMP = os.path.join(WORK, CASE)
os.makedirs(TMP, exist_ok=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


# ---- the server ------------------------------------------------------------------------

class Server:
    """linnet serve on a free port, one rank or under mpirun; its log in TMP."""

    def __init__(self, *args, checkpoint=MODEL, ranks=1, tp=1, name="server", env=None, model_name=NAME):
        cmd = [LINNET, "serve", "--checkpoint", checkpoint, "--port", "0", "--backend", "cpu",
               "--served-model-name", model_name, *args]
        if ranks > 1:
            cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", *cmd, "--tp", str(tp), "--threads", "1"]
        self.log = os.path.join(TMP, name + ".log")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True,
                                     start_new_session=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + 120
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"no 'listening on' line in 120 s; log:\n{self.tail()}")
            if line is None:
                raise AssertionError(f"the server ended before listening; log:\n{self.tail()}")
            if "listening on http://" in line:
                self.base = line.split("listening on ")[1].split()[0]
                break
        self.port = int(self.base.rsplit(":", 1)[1])

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def tail(self, n=4000):
        with open(self.log, errors="replace") as f:
            return f.read()[-n:]

    def rank_pid(self, rank):
        """The pid of world rank `rank` (the process whose environment says so)."""
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if (b"serve" in cmdline and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env
                    and f"--served-model-name\0{NAME}".encode() in cmdline and b"mpirun" not in cmdline
                    and os.getsid(int(pid)) == os.getsid(self.proc.pid)):
                return int(pid)
        raise AssertionError(f"no process of rank {rank}")

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the server did not end within {timeout} s; log:\n{self.tail()}")

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


def http(base, method, path, body=None, timeout=60, raw=None):
    """(status, parsed JSON or text) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def metrics(base):
    _, text = http(base, "GET", "/metrics")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split()
            out[k] = float(v)
    return out


def wait_for(what, cond, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


# ---- prompts and `linnet generate`'s answers to them -----------------------------------

WORDS = ("the cat sat on a mat while the dog ran to the park and it was a sunny day so "
         "they played with a red ball until the sun went down Lily said hello").split()


def prompts(n, seed=1):
    """Mixed lengths (1 to 18 words), max_tokens (1 to 24), greedy and sampled, some with stop
    strings: within MaxSeq 64."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.randint(1, 18)
        p = {"id": f"p{i}", "text": " ".join(rng.choice(WORDS) for _ in range(words)).capitalize(),
             "max_new_tokens": rng.randint(1, 24)}
        if i % 3 == 1:
            p.update(temperature=0.8, seed=1000 + i)
        if i % 6 == 4:
            p.update(top_p=0.9)
        if i % 5 == 2:
            p.update(stop=["e", "a", "in"])  # cut where the text first has one
        out.append(p)
    return out


def generate(ps, *extra):
    src, dst = os.path.join(TMP, "prompts.jsonl"), os.path.join(TMP, "generated.jsonl")
    with open(src, "w") as f:
        for p in ps:
            f.write(json.dumps(p) + "\n")
    r = subprocess.run([LINNET, "generate", "--checkpoint", MODEL, "--prompts", src, "--output", dst, "--overwrite",
                        "--backend", "cpu", "--quiet", *extra], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"linnet generate failed: {r.stderr[-2000:]}")
    with open(dst) as f:
        out = {j["id"]: j for j in map(json.loads, f)}
    bad = [j for j in out.values() if "error" in j]
    check(not bad, f"linnet generate refused prompts: {bad[:3]}")
    return out


def request_of(p):
    return dict(model=NAME, prompt=p["text"], max_tokens=p["max_new_tokens"], temperature=p.get("temperature", 0),
                seed=p.get("seed", 0), top_p=p.get("top_p", 1), stop=p.get("stop"))


def same_as_generate(p, want, text, finish_reason, completion_tokens):
    check(text == want["text"], f"{p['id']}: text {text!r} != generate's {want['text']!r}")
    check(finish_reason == want["finish_reason"], f"{p['id']}: finish_reason {finish_reason} != {want['finish_reason']}")
    check(completion_tokens == want["completion_tokens"],
          f"{p['id']}: {completion_tokens} tokens != generate's {want['completion_tokens']}")


# ---- cases -----------------------------------------------------------------------------

def openai_checks(srv, ps=None):
    import openai
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=60)
    check([m.id for m in c.models.list().data] == [NAME], "models.list")
    ps = ps or prompts(12, seed=2)
    want = generate(ps)
    check(any(w["finish_reason"] == "stop" for w in want.values()), "no prompt stopped at a stop string")
    for p in ps:
        r = c.completions.create(**request_of(p))
        same_as_generate(p, want[p["id"]], r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens)
    # Streaming: the chunks add up to the same text; the last one says why it ended.
    for p in ps[:6]:
        chunks = list(c.completions.create(**request_of(p), stream=True, stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        ends = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        usage = [ch.usage for ch in chunks if ch.usage]
        same_as_generate(p, want[p["id"]], text, ends[-1] if ends else None, usage[-1].completion_tokens)
    # Log-probabilities of prompt and completion (echo): the fixture's lm-eval numbers.
    e = json.load(open(os.path.join(FIXTURE, "expected.json")))
    for doc in e["mc"]["docs"][:4]:
        for q in doc["requests"][:2]:
            ids = q["context_enc"] + q["continuation_enc"]
            r = c.completions.create(model=NAME, prompt=ids, max_tokens=0, echo=True, logprobs=1, temperature=0)
            lp = r.choices[0].logprobs
            check(lp.token_logprobs[0] is None and len(lp.token_logprobs) == len(ids), "echo logprobs cover the prompt")
            got = sum(lp.token_logprobs[len(q["context_enc"]):])
            check(abs(got - q["loglikelihood"]) <= 1e-4 * max(1, abs(q["loglikelihood"])),
                  f"{doc['id']}: {got} vs lm-eval's {q['loglikelihood']}")
            greedy = all(t == max(top.values()) for t, top in
                         zip(lp.token_logprobs[len(q["context_enc"]):], lp.top_logprobs[len(q["context_enc"]):]))
            check(greedy == q["is_greedy"], f"{doc['id']}: is_greedy {greedy} vs {q['is_greedy']}")
    # Greedy completion tokens are the top-1 of their position, bit for bit; top-n in order.
    r = c.completions.create(model=NAME, prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    check(len(lp.tokens) == 6 and "".join(lp.tokens) == r.choices[0].text or r.choices[0].finish_reason == "stop",
          f"logprobs tokens {lp.tokens} vs text {r.choices[0].text!r}")
    for t, top in zip(lp.token_logprobs, lp.top_logprobs):
        check(len(top) <= 3 and t == max(top.values()), f"greedy token logprob {t} vs top {top}")
    # n samples, seeded: distinct, and the same again for the same seed.
    a = c.completions.create(model=NAME, prompt="The dog", max_tokens=8, temperature=1.0, n=3, seed=5)
    b = c.completions.create(model=NAME, prompt="The dog", max_tokens=8, temperature=1.0, n=3, seed=5)
    check([x.index for x in a.choices] == [0, 1, 2], "n=3 choices")
    check([x.text for x in a.choices] == [x.text for x in b.choices], "the same seed, the same samples")
    check(len({x.text for x in a.choices}) > 1, "n samples differ")
    # Several prompts in one request, as token ids.
    r = c.completions.create(model=NAME, prompt=[[0, 644, 283], [0, 42]], max_tokens=3, temperature=0)
    check(len(r.choices) == 2 and r.usage.prompt_tokens == 5, "two token-id prompts")
    # Bad requests: the client's own exceptions, with the server's message.
    for kwargs, status, words in [
            (dict(prompt=[0, 5, 99999]), 400, "prompt[2]` = 99999 is not a token id in [0, Vocab=1398)"),
            (dict(prompt="hi", max_tokens=10 ** 12), 400, "exceeds MaxSeq = 64"),
            (dict(prompt="hi", top_p=2), 400, "`top_p` = 2 must be in (0, 1]"),
            (dict(prompt="hi", n=0), 400, "`n` must be an integer in [1, 16]"),
            (dict(prompt="hi", extra_body={"use_beam_search": True}), 400, "`use_beam_search` is not supported"),
            (dict(prompt="hi", presence_penalty=3), 400, "presence_penalty"),
            (dict(prompt="hi", logprobs=50), 400, "`logprobs` must be an integer in [0, 20]")]:
        try:
            c.completions.create(model=NAME, **kwargs)
            raise AssertionError(f"{kwargs}: accepted")
        except openai.APIStatusError as err:
            check(err.status_code == status and words in str(err), f"{kwargs}: {err.status_code} {err}")
    try:
        c.completions.create(model="another", prompt="hi")
        raise AssertionError("another model: accepted")
    except openai.NotFoundError as err:
        check("does not exist" in str(err), str(err))
    check(http(srv.base, "GET", "/health")[0] == 200, "healthy after bad requests")


def case_openai():
    with Server() as srv:
        openai_checks(srv)
        srv.proc.send_signal(signal.SIGTERM)
        check(srv.wait() == 0, "exit 0 after SIGTERM")


def case_lm_eval():
    """lm-eval's local-completions against the server: the loglikelihoods and is_greedy of
    the fixture's multiple-choice task as lm-eval's hf backend gave them (expected.json) and
    as `linnet eval` gives them. The API sends at most max_length − 1 tokens (it keeps one
    for the token it asks for), where hf feeds max_length + 1: a request longer than 63
    tokens keeps one token fewer through the API, as `linnet eval --max-length 62` does."""
    def linnet_eval(*extra):
        ev = os.path.join(TMP, "eval.jsonl")
        r = subprocess.run([LINNET, "eval", "--checkpoint", MODEL, "--data", os.path.join(FIXTURE, "mc.jsonl"),
                            "--output", ev, "--overwrite", "--backend", "cpu", "--quiet", *extra],
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, r.stderr[-2000:])
        return {j["id"]: j for j in map(json.loads, open(ev))}
    as_hf, as_api = linnet_eval(), linnet_eval("--max-length", "62")
    out = os.path.join(TMP, "lm_eval_out")
    shutil.rmtree(out, ignore_errors=True)
    with Server() as srv:
        args = (f"model={NAME},base_url={srv.base}/v1/completions,tokenizer_backend=huggingface,"
                f"tokenizer={MODEL},num_concurrent=2,max_retries=1,max_length=64,add_bos_token=True")
        cmd = [os.path.join(os.path.dirname(sys.executable), "lm_eval"), "--model", "local-completions",
               "--model_args", args, "--tasks", "linnet_mc", "--include_path", "tools/lm_eval/tasks",
               "--log_samples", "--output_path", out, "--batch_size", "1"]
        r = subprocess.run(cmd, cwd=SOURCE, capture_output=True, text=True, timeout=600)
        check(r.returncode == 0, f"lm_eval failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    files = glob.glob(os.path.join(out, "**", "samples_linnet_mc_*.jsonl"), recursive=True)
    check(len(files) == 1, files)
    samples = [json.loads(x) for x in open(files[0])]
    e = {d["id"]: d for d in json.load(open(os.path.join(FIXTURE, "expected.json")))["mc"]["docs"]}
    close = lambda a, b: abs(a - b) <= 1e-4 * max(1, abs(b))
    n = truncated = spelled = 0
    for s in samples:
        doc_id = s["doc"]["id"]
        if "<|" in s["doc"]["context"]:
            # A context that spells out a special token: lm-eval's API backend tokenizes it
            # on the client unlike its hf backend (another BOS), so the ids differ before the
            # server sees them.
            spelled += 1
            continue
        for k, (resp, want) in enumerate(zip(s["resps"], e[doc_id]["requests"])):
            ll, greedy = float(resp[0][0]), resp[0][1] in (True, "True")
            what = f"{doc_id} choice {k}"
            mine = as_api[doc_id]
            check(close(ll, mine["loglikelihood"][k]), f"{what}: {ll} vs linnet eval {mine['loglikelihood'][k]}")
            check(greedy == mine["is_greedy"][k], f"{what}: is_greedy {greedy} vs linnet eval")
            if len(want["context_enc"]) + len(want["continuation_enc"]) > 63:
                truncated += 1
            else:
                check(close(ll, want["loglikelihood"]), f"{what}: {ll} vs lm-eval hf {want['loglikelihood']}")
                check(close(ll, as_hf[doc_id]["loglikelihood"][k]), f"{what}: {ll} vs linnet eval")
                check(greedy == want["is_greedy"], f"{what}: is_greedy {greedy} vs lm-eval hf")
            n += 1
    check(n == 46 and spelled == 1 and truncated < n, f"{n} requests compared ({truncated} truncated, {spelled} docs left out)")
    print(f"lm_eval local-completions: {n} loglikelihoods and is_greedy equal linnet eval's to 1e-4, "
          f"and lm-eval hf's for the {n - truncated} that fit in 63 tokens")


async def load(base, ps, concurrency_check=True):
    """Every prompt at once (500 concurrent requests), through the openai async client."""
    import openai
    # The client's own pool allows 1000 connections: all 500 are open at once.
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=240) as c:
        t0 = time.time()

        async def one(p):
            s = time.time()
            if int(p["id"][1:]) % 2:  # half of them streamed
                first, text, end, usage = None, "", None, None
                async for ch in await c.completions.create(**request_of(p), stream=True,
                                                           stream_options={"include_usage": True}):
                    if ch.choices:
                        if first is None and ch.choices[0].text:
                            first = time.time() - s
                        text += ch.choices[0].text
                        end = ch.choices[0].finish_reason or end
                    if ch.usage:
                        usage = ch.usage.completion_tokens
                return p, text, end, usage, time.time() - s, first
            r = await c.completions.create(**request_of(p))
            return p, r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens, time.time() - s, None

        results = await asyncio.wait_for(asyncio.gather(*(one(p) for p in ps)), timeout=300)
        return results, time.time() - t0


def load_checks(srv, n=500, extra_generate=()):
    ps = prompts(n, seed=3)
    t0 = time.time()
    want = generate(ps, *extra_generate)
    gen_seconds = time.time() - t0
    results, seconds = asyncio.run(load(srv.base, ps))
    tokens = 0
    for p, text, end, usage, _, _ in results:
        same_as_generate(p, want[p["id"]], text, end, usage)
        tokens += usage
    lat = sorted(r[4] for r in results)
    ttft = sorted(r[5] for r in results if r[5] is not None)
    pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))]
    m = metrics(srv.base)
    check(m["linnet_requests_finished_total"] >= n and m["linnet_kv_pages_used"] == 0 and
          m["linnet_requests_running"] == 0, f"metrics after the load: {m}")
    print(f"load: {n} concurrent requests, every answer equal to linnet generate's; {tokens} tokens in {seconds:.2f} s "
          f"({tokens / seconds:.0f} tok/s; linnet generate over the same prompts, load included: {gen_seconds:.2f} s); "
          f"latency p50 {pct(lat, .5):.3f} s p90 {pct(lat, .9):.3f} s p99 {pct(lat, .99):.3f} s; "
          f"streamed TTFT p50 {pct(ttft, .5):.3f} s p99 {pct(ttft, .99):.3f} s")


def case_load(ranks=1, tp=1):
    with Server("--max-rows", "64", ranks=ranks, tp=tp) as srv:
        load_checks(srv)
        srv.proc.send_signal(signal.SIGTERM) if ranks == 1 else os.kill(srv.rank_pid(0), signal.SIGTERM)
        check(srv.wait() == 0, f"exit 0 after SIGTERM; log:\n{srv.tail()}")


def slow_model():
    """A model slow enough (hidden 768, 6 layers, MaxSeq 2048) that a long answer takes seconds."""
    d = os.path.join(WORK, "slow-model")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return d
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    cfg.update(hidden_size=768, intermediate_size=2304, num_hidden_layers=6, num_attention_heads=12,
               num_key_value_heads=12, max_position_embeddings=2048)
    tmp = d + f".tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"))
    subprocess.run([LINNET, "init", "--config", os.path.join(tmp, "config.json"), "--out", tmp, "--seed", "3"],
                   check=True, capture_output=True, timeout=120)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        with open(os.path.join(MODEL, f), "rb") as a, open(os.path.join(tmp, f), "wb") as b:
            b.write(a.read())
    try:
        os.rename(tmp, d)
    except OSError:
        pass  # another case made it first
    return d


def raw_post(port, body):
    """A POST on a plain socket, to hang up on it at will."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def faults_checks(srv, ranks):
    base = srv.base
    long = {"prompt": "Hello", "max_tokens": 2040, "temperature": 0, "ignore_eos": True}
    # 1. A client that hangs up mid-stream: its pages are freed at once, generation stops.
    before = metrics(base)
    s = raw_post(srv.port, dict(long, stream=True))
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(4096)
    s.close()
    wait_for("the pages of a stream whose client left freed",
             lambda: (lambda m: m["linnet_kv_pages_used"] == 0 and m["linnet_requests_running"] == 0 and
                      m["linnet_requests_cancelled_total"] == before["linnet_requests_cancelled_total"] + 1)(metrics(base)),
             timeout=20)
    spent = metrics(base)["linnet_generation_tokens_total"] - before["linnet_generation_tokens_total"]
    check(spent < 1000, f"{spent} tokens generated for a client that left after 3")
    # 2. The same without streaming: noticed by the whitespace heartbeat within seconds.
    before = metrics(base)
    s = raw_post(srv.port, long)
    time.sleep(0.3)
    s.close()
    wait_for("a non-streaming request whose client left cancelled",
             lambda: metrics(base)["linnet_requests_cancelled_total"] == before["linnet_requests_cancelled_total"] + 1,
             timeout=20)
    wait_for("its pages freed", lambda: metrics(base)["linnet_kv_pages_used"] == 0, timeout=20)
    # 3. Bad bodies: 400s with the OpenAI error shape naming the field; 413 past --max-body.
    for raw, status, words in [
            (b"{not json", 400, "the request body: malformed JSON"),
            (b'{"prompt": "hi", "stop": ' + b"[" * 2000 + b"]" * 2000 + b"}", 400, "nested deeper than 64 levels"),
            (b"[1, 2]", 400, "must be a JSON object"),
            (json.dumps({"prompt": "hi", "max_tokens": "10"}).encode(), 400, "`max_tokens` must be a non-negative integer"),
            (json.dumps({"prompt": "hi", "max_tokens": 1e300}).encode(), 400, "`max_tokens` must be a non-negative integer"),
            (json.dumps({"prompt": [[0, 1], [2, -1]]}).encode(), 400, "`prompt[1][1]` = -1 is not a token id"),
            (json.dumps({"prompt": "hi", "max_tokens": 3000}).encode(), 400, "exceeds MaxSeq = 2048"),
            (json.dumps({"prompt": "hi", "stop": [""]}).encode(), 400, "`stop` must be a non-empty string"),
            (json.dumps({"prompt": "hi", "temperature": -1}).encode(), 400, "`temperature` = -1 must be 0"),
            (json.dumps({"prompt": "x" * 5000}).encode(), 413, "larger than 4096 bytes")]:
        st, body = http(base, "POST", "/v1/completions", raw=raw)
        check(st == status and isinstance(body, dict) and words in body["error"]["message"],
              f"{raw[:60]!r}: {st} {body}")
    check(http(base, "GET", "/health")[0] == 200, "healthy after bad input")
    # 4. A full queue answers 503 (back-pressure), the others are answered in full.
    async def burst():
        import aiohttp
        async with aiohttp.ClientSession() as h:
            async def one(i):
                async with h.post(base + "/v1/completions",
                                  json={"prompt": f"Hi {i}", "max_tokens": 40, "temperature": 0, "ignore_eos": True}) as r:
                    return r.status, await r.json(content_type=None)
            return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(12))), timeout=120)
    answers = asyncio.run(burst())
    codes = [st for st, _ in answers]
    check(codes.count(503) > 0 and codes.count(200) > 0 and set(codes) <= {200, 503}, f"burst: {codes}")
    for st, body in answers:
        if st == 503:
            check("queue is full" in body["error"]["message"], body)
        else:
            check(body["usage"]["completion_tokens"] == 40, body)
    # 5. SIGTERM: the stream in progress ends in full, new requests get 503, exit 0.
    s = raw_post(srv.port, dict(long, max_tokens=600, stream=True))
    got = b""
    while got.count(b"data: ") < 2:
        got += s.recv(4096)
    target = srv.proc.pid if ranks == 1 else srv.rank_pid(0)
    os.kill(target, signal.SIGTERM)
    # Noticed at the next step; the bound is generous because ctest runs a SLURM job beside
    # this on the same 2 cores (the 600-token stream outlasts it either way).
    try:
        wait_for("/health says draining", lambda: http(base, "GET", "/health")[0] == 503, timeout=30)
    except AssertionError as e:
        raise AssertionError(f"{e}; log:\n{srv.tail()}")
    st, body = http(base, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    check(st == 503 and "shutting down" in body["error"]["message"], f"during the drain: {st} {body}")
    s.settimeout(60)
    while b"data: [DONE]" not in got:
        chunk = s.recv(65536)
        check(chunk, "the stream was cut during the drain")
        got += chunk
    check(b'"finish_reason":"length"' in got, "the drained stream ended by length")
    check(srv.wait() == 0, f"exit 0 after the drain; log:\n{srv.tail()}")


def case_faults(ranks=1, tp=1):
    with Server("--max-body", "4096", "--max-waiting", "2", "--max-rows", "2", checkpoint=slow_model(), ranks=ranks,
                tp=tp) as srv:
        faults_checks(srv, ranks)
    if ranks > 1:
        # A rank that dies ends the job: no hang, and the client's request fails rather than waits.
        with Server(checkpoint=slow_model(), ranks=ranks, tp=tp, name="killed") as srv:
            s = raw_post(srv.port, {"prompt": "Hello", "max_tokens": 1900, "temperature": 0, "ignore_eos": True,
                                    "stream": True})
            s.recv(4096)
            t0 = time.time()
            os.kill(srv.rank_pid(1), signal.SIGKILL)
            rc = srv.wait(timeout=60)
            check(rc != 0, "the job ended with 0 after a rank was killed")
            s.settimeout(30)
            try:
                while s.recv(65536):
                    pass
            except OSError:
                pass
            print(f"a killed rank ended the job in {time.time() - t0:.1f} s (exit {rc})")


def case_replicas():
    with Server("--max-rows", "64", ranks=2, tp=1) as srv:
        openai_checks(srv, prompts(6, seed=4))
        load_checks(srv)
        os.kill(srv.rank_pid(0), signal.SIGTERM)
        check(srv.wait() == 0, f"exit 0 after SIGTERM; log:\n{srv.tail()}")


def stories15m():
    """stories15M imported into a checkpoint with a tokenizer_config.json (what the Hugging
    Face tokenizer lm-eval loads needs), or None with the reason when it is not to be had."""
    r = subprocess.run(["bash", os.path.join(SOURCE, "scripts/fetch-stories15M"), os.path.join(WORK, "models/stories15M")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    src = r.stdout.strip()
    d = os.path.join(WORK, "stories15M-hf")
    # As a user makes it: import-llama2c writes the tokenizer_config.json that transformers
    # (so lm-eval) needs to read the folder as linnet does; nothing is added by hand.
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([LINNET, "import-llama2c", "--input", os.path.join(src, "stories15M.bin"), "--out", d],
                   check=True, capture_output=True, timeout=300)
    return d, ""


def documented_lm_eval_args():
    """The --model_args of docs/serve.md's lm_eval command, as a dict (the test runs that command)."""
    import re
    text = open(os.path.join(SOURCE, "docs/serve.md")).read()
    m = re.search(r"lm_eval --model local-completions \\\n\s*--model_args (\S+)", text)
    check(m, "docs/serve.md has no lm_eval --model local-completions command")
    return dict(kv.split("=", 1) for kv in m.group(1).split(","))


def case_stories15m():
    """The real model: the openai client's completions equal `linnet generate`'s, and
    lm-eval's local-completions gives `linnet eval`'s loglikelihoods on a small task."""
    global MODEL
    d, why = stories15m()
    if d is None:
        print(f"skipped: stories15M not to be had: {why}")
        sys.exit(77)
    MODEL = d
    docs = [("Once upon a time, there was a little", ["girl", "dog", "car"]),
            ("Lily and Tom went to the park. They played on the", ["swings", "moon", "table"]),
            ("The sun was hot, so Ben drank some", ["water", "rocks"]),
            ("Mom said, \"It is time for", ["bed", "school", "dinner", "the"]),
            ("The cat saw a bird in the tree and wanted to", ["catch", "sing", "eat", "fly"]),
            ("One day, a big red ball rolled down the", ["hill", "street", "sky"])]
    tasks = os.path.join(TMP, "tasks")
    os.makedirs(tasks, exist_ok=True)
    with open(os.path.join(tasks, "stories_mc.jsonl"), "w") as f:
        for i, (ctx, ch) in enumerate(docs):
            f.write(json.dumps({"id": f"s{i}", "context": ctx, "choices": ch, "label": 0}) + "\n")
    with open(os.path.join(tasks, "stories_mc.yaml"), "w") as f:
        f.write(f"task: stories_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tasks}/stories_mc.jsonl\n"
                "test_split: test\noutput_type: multiple_choice\ndoc_to_text: context\ndoc_to_choice: choices\n"
                "doc_to_target: label\ntarget_delimiter: \" \"\nmetric_list:\n  - metric: acc\nmetadata:\n  version: 1.0\n")
    data = os.path.join(TMP, "eval_in.jsonl")
    with open(data, "w") as f:
        for i, (ctx, ch) in enumerate(docs):
            f.write(json.dumps({"id": f"s{i}", "context": ctx, "continuation": [" " + c for c in ch]}) + "\n")
    ev = os.path.join(TMP, "eval.jsonl")
    r = subprocess.run([LINNET, "eval", "--checkpoint", d, "--data", data, "--output", ev, "--overwrite", "--backend", "cpu",
                        "--quiet"],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, r.stderr[-2000:])
    want = {j["id"]: j for j in map(json.loads, open(ev))}
    out = os.path.join(TMP, "lm_eval_out")
    shutil.rmtree(out, ignore_errors=True)
    with Server(checkpoint=d) as srv:
        ps = [{"id": f"g{i}", "text": t, "max_new_tokens": 32} for i, t in
              enumerate(["Once upon a time", "Lily and Tom", "The dog ran", "It was a sunny day"])]
        ps += [{"id": "g-sampled", "text": "Once upon a time", "max_new_tokens": 32, "temperature": 0.8, "seed": 9}]
        openai_checks_generate(srv, ps)
        # docs/serve.md's command, with this server's address and folder in place of the doc's.
        doc = documented_lm_eval_args()
        check(doc.get("add_bos_token") == "True", f"the documented command lacks add_bos_token=True: {doc}")
        doc.update(model=NAME, base_url=f"{srv.base}/v1/completions", tokenizer=d, num_concurrent="2", max_retries="1")
        args = ",".join(f"{k}={v}" for k, v in doc.items())
        r = subprocess.run([os.path.join(os.path.dirname(sys.executable), "lm_eval"), "--model", "local-completions",
                            "--model_args", args, "--tasks", "stories_mc", "--include_path", tasks, "--log_samples",
                            "--output_path", out, "--batch_size", "1"], cwd=TMP, capture_output=True, text=True,
                           timeout=600)
        check(r.returncode == 0, f"lm_eval failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
    samples = [json.loads(x) for f in glob.glob(os.path.join(out, "**", "samples_stories_mc_*.jsonl"), recursive=True)
               for x in open(f)]
    n = 0
    for s in samples:
        mine = want[s["doc"]["id"]]
        for k, resp in enumerate(s["resps"]):
            ll, greedy = float(resp[0][0]), resp[0][1] in (True, "True")
            check(abs(ll - mine["loglikelihood"][k]) <= 1e-4 * max(1, abs(ll)),
                  f"{s['doc']['id']} choice {k}: lm-eval via the server {ll} vs linnet eval {mine['loglikelihood'][k]}")
            check(greedy == mine["is_greedy"][k], f"{s['doc']['id']} choice {k}: is_greedy")
            n += 1
    check(n == sum(len(c) for _, c in docs), f"{n} requests scored")
    print(f"stories15M: completions equal linnet generate's; lm-eval local-completions gave linnet eval's "
          f"{n} loglikelihoods to 1e-4")


def openai_checks_generate(srv, ps):
    import openai
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=60)
    want = generate(ps)
    for p in ps:
        r = c.completions.create(**request_of(p))
        same_as_generate(p, want[p["id"]], r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens)
        print(f"{p['id']}: {r.choices[0].text!r}")


def case_clients():
    """Slow and odd clients. Before: six connections sending a header byte a second held every
    thread of --http-threads 4 and kept a normal request waiting over 40 s; an HTTP/1.0 client
    got a chunked HTTP/1.1 answer."""
    with Server("--http-threads", "4", "--http-timeout", "3", "--http-idle-timeout", "2", name="clients") as srv:
        stop = threading.Event()

        def trickle(s):
            for b in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
                if stop.is_set():
                    return
                try:
                    s.send(bytes([b]))
                except OSError:
                    return
                time.sleep(1)

        slow = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(6)]
        for s in slow:
            threading.Thread(target=trickle, args=(s,), daemon=True).start()
        time.sleep(1)
        t0 = time.time()
        st, body = http(srv.base, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout=60)
        took = time.time() - t0
        check(st == 200, f"the normal request: {st} {body}")
        check(took < 12, f"a normal request waited {took:.1f} s behind 6 slow clients (--http-timeout 3)")
        # The slow ones were closed by the server at their deadline.
        for s in slow:
            s.settimeout(15)
            try:
                got = s.recv(100)
            except ConnectionResetError:
                got = b""
            check(got == b"" or got.startswith(b"HTTP/1.1 4"), f"a slow client got {got!r}")
        stop.set()
        # An idle connection is closed after --http-idle-timeout.
        idle = socket.create_connection(("127.0.0.1", srv.port))
        idle.settimeout(15)
        t0 = time.time()
        check(idle.recv(100) == b"", "an idle connection got bytes")
        check(time.time() - t0 < 10, "an idle connection stayed open")
        # Headers past the limit (64 KiB) end the connection; the server carries on.
        big = socket.create_connection(("127.0.0.1", srv.port))
        big.settimeout(15)
        try:
            big.sendall(b"GET /health HTTP/1.1\r\n" + b"X-Big: " + b"b" * 4000 + b"\r\n" * 1)
            for _ in range(40):
                big.sendall(b"X-More: " + b"c" * 4000 + b"\r\n")
            answer = big.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
        check(not answer.startswith(b"HTTP/1.1 200"), f"160 KiB of headers were served: {answer!r}")
        check(http(srv.base, "GET", "/health")[0] == 200, "healthy after the odd clients")
        # HTTP/1.0: no chunks (the answer ends where the connection does), whole and streamed.
        for stream in (False, True):
            # ignore_eos: a sampled end-of-sequence would end the answer early (it did, once in CI).
            body = json.dumps({"prompt": "hi", "max_tokens": 3, "stream": stream, "ignore_eos": True}).encode()
            c = socket.create_connection(("127.0.0.1", srv.port))
            c.settimeout(30)
            c.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            got = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                got += chunk
            head, _, rest = got.partition(b"\r\n\r\n")
            check(head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0], f"HTTP/1.0: {head!r}")
            check(b"chunked" not in head.lower(), f"an HTTP/1.0 client got chunks: {head!r}")
            if stream:
                check(rest.startswith(b"data: {") and rest.rstrip().endswith(b"data: [DONE]"), f"stream: {rest[:200]!r}")
            else:
                check(json.loads(rest)["usage"]["completion_tokens"] == 3, f"whole: {rest[:200]!r}")


# ---- the connections: bodies held to --max-body, slow and idle clients ----------------------

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def read_answer(s, timeout=10.0):
    """(status, head, body) of one answer off socket `s` (status 0 when none came within
    `timeout`); a 100 Continue before it is skipped, a chunked body decoded."""
    s.settimeout(timeout)
    got = [b""]

    def until(cond):
        while not cond():
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionResetError("closed")
            got[0] += chunk
    try:
        while True:
            until(lambda: b"\r\n\r\n" in got[0])
            head, _, got[0] = got[0].partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 100"):
                break
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])}
        body = b""
        if fields.get(b"transfer-encoding") == b"chunked":
            while True:
                until(lambda: b"\r\n" in got[0])
                size = int(got[0].split(b"\r\n", 1)[0], 16)
                start = got[0].index(b"\r\n") + 2
                until(lambda: len(got[0]) >= start + size + 2)
                body += got[0][start:start + size]
                got[0] = got[0][start + size + 2:]
                if size == 0:
                    break
        else:
            length = int(fields.get(b"content-length", b"0"))
            until(lambda: len(got[0]) >= length)
            body = got[0][:length]
        return int(head.split()[1]), head, body
    except (socket.timeout, ConnectionResetError):
        return 0, got[0], b""


def raw_answer(port, data, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        return read_answer(s, timeout)
    finally:
        s.close()


def error_message(body):
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return f"(not the API's error shape: {body[:200]!r})"


def case_body_limits():
    """--max-body holds for every body as it arrives. Before: 256 MiB sent chunked against
    --max-body 1000000 were buffered whole (RSS 153 -> 405 MB) and answered 400 at the end; an
    oversized Content-Length was read to its end before the 413 came; a negative one was 413."""
    with Server("--max-body", "1000000", name="body_limits") as srv:
        pid = srv.proc.pid
        check(http(srv.base, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == 200, "a first request")
        before = rss_kib(pid)
        peak = [before]
        flooding = threading.Event()
        flooding.set()

        def sample():
            while flooding.is_set():
                peak[0] = max(peak[0], rss_kib(pid))
                time.sleep(0.005)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        # 1. 256 MiB chunked (64 KiB chunks), sent until the server answers.
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
        sent, answered_early, t0 = 0, False, time.time()
        while sent < 256 << 20 and time.time() - t0 < 60:
            if select.select([s], [], [], 0)[0]:
                answered_early = True
                break
            try:
                s.sendall(chunk)
            except OSError:
                break
            sent += 0x10000
        status, head, body = read_answer(s, timeout=60)
        s.close()
        flooding.clear()
        sampler.join()
        grown = (peak[0] - before) / 1024
        print(f"chunked flood: {status} after {sent / 2**20:.1f} MiB sent in {time.time() - t0:.2f} s; "
              f"server RSS {before / 1024:.1f} MB, peak {peak[0] / 1024:.1f} MB (+{grown:.1f} MB)")
        check(status == 413 and "larger than 1000000 bytes" in error_message(body),
              f"256 MiB chunked: {status} {error_message(body)}")
        check(answered_early and sent < 64 << 20, f"the 413 came after {sent / 2**20:.0f} MiB were sent")
        check(grown < 8, f"the server's RSS grew by {grown:.1f} MB under a chunked flood (--max-body 1000000)")
        # 2. An oversized Content-Length, its body never sent: 413 from the head alone.
        t0 = time.time()
        status, head, body = raw_answer(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                                  b"Content-Type: application/json\r\nContent-Length: 268435456\r\n\r\n",
                                        timeout=5)
        check(status == 413 and "--max-body" in error_message(body),
              f"Content-Length 256 MiB without its body: {status} {head[:100]!r} after {time.time() - t0:.1f} s")
        # 3. Lengths that are not a number of bytes, or that conflict: 400 naming the header.
        for headers, code, words in [
                (b"Content-Length: -1\r\n", 400, "Content-Length `-1` is not a number of bytes"),
                (b"Content-Length: -100000000\r\n", 400, "is not a number of bytes"),
                (b"Content-Length: abc\r\n", 400, "Content-Length `abc` is not a number of bytes"),
                (b"Content-Length: 1e3\r\n", 400, "is not a number of bytes"),
                (b"Content-Length: 2\r\nContent-Length: 3\r\n", 400, "conflicting Content-Length"),
                (b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", 400, "both Transfer-Encoding and Content-Length"),
                (b"Transfer-Encoding: gzip, chunked\r\n", 501, "only chunked")]:
            status, head, body = raw_answer(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + headers
                                            + b"\r\n{}", timeout=5)
            check(status == code and words in error_message(body), f"{headers!r}: {status} {error_message(body)}")
        for chunks in [b"zz\r\n{}\r\n0\r\n\r\n", b"1\r\n{}\r\n0\r\n\r\n"]:
            status, head, body = raw_answer(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                                      b"Transfer-Encoding: chunked\r\n\r\n" + chunks, timeout=5)
            check(status == 400 and "chunk" in error_message(body), f"chunks {chunks!r}: {status} {error_message(body)}")
        # 4. Within the limit a chunked body is served, with "Expect: 100-continue" too.
        data = json.dumps({"prompt": "hi", "max_tokens": 2, "temperature": 0}).encode()
        chunked = b"".join(b"%x\r\n" % len(data[i:i + 7]) + data[i:i + 7] + b"\r\n" for i in range(0, len(data), 7))
        status, head, body = raw_answer(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                                  b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n")
        check(status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2, f"chunked: {status} {body[:200]!r}")
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: "
                  + str(len(data)).encode() + b"\r\n\r\n")
        check(s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n", "no 100 Continue")
        s.sendall(data)
        status, head, body = read_answer(s)
        s.close()
        check(status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2, f"100-continue: {status} {body[:200]!r}")
        check(http(srv.base, "GET", "/health")[0] == 200, "healthy after the floods")


def trickle(sock, data, stop, every=1.0):
    """Sends `data` a byte every `every` seconds until done, stopped or closed."""
    for b in data:
        if stop.wait(every):
            return
        try:
            sock.send(bytes([b]))
        except OSError:
            return


def case_slow_clients():
    """Slow and idle clients cost a socket, not a thread. Before: with --http-threads 4, 8
    clients trickling a byte a second made normal requests time out (at 40 s), and six idle
    connections delayed one by 35 s."""
    with Server("--http-threads", "4", name="slow_clients") as srv:  # the default timeouts: 30 s, idle 5 s
        stop = threading.Event()
        slow = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(8)]
        for s in slow:
            threading.Thread(target=trickle, args=(s, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100,
                                                   stop), daemon=True).start()
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(6)]
        for _ in range(3):  # a head and part of its body, then nothing
            idle.append(socket.create_connection(("127.0.0.1", srv.port)))
            idle[-1].sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        time.sleep(1.5)
        took = []
        for i in range(4):
            t0 = time.time()
            try:
                st, body = http(srv.base, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout=10)
            except OSError as e:
                st, body = None, repr(e)
            took.append(time.time() - t0)
            check(st == 200, f"request {i} behind 8 trickling and 9 idle clients: {st} {body} after {took[-1]:.1f} s")
            check(took[-1] < 3, f"request {i} waited {took[-1]:.1f} s behind 8 trickling and 9 idle clients")
        # A streamed answer too, while they wait.
        t0 = time.time()
        s = raw_post(srv.port, {"prompt": "hi", "max_tokens": 4, "stream": True})
        got = b""
        while b"data: [DONE]" not in got and time.time() - t0 < 10:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.close()
        check(b"data: [DONE]" in got and time.time() - t0 < 3, f"a stream behind slow clients: {got[-200:]!r}")
        print(f"slow_clients: 4 requests behind 8 trickling and 9 idle connections (--http-threads 4) took "
              f"{', '.join(f'{t:.3f}' for t in took)} s; a stream {time.time() - t0:.3f} s")
        stop.set()
        for s in slow + idle:
            s.close()
    # The deadline holds: a request arrives whole within --http-timeout of its first byte, or
    # gets a 408; an idle connection closes after --http-idle-timeout; keep-alive serves several.
    with Server("--http-threads", "4", "--http-timeout", "2", "--http-idle-timeout", "1", name="deadlines") as srv:
        stop = threading.Event()
        s = socket.create_connection(("127.0.0.1", srv.port))
        threading.Thread(target=trickle, args=(s, b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 100, stop, 0.2),
                         daemon=True).start()
        t0 = time.time()
        status, head, body = read_answer(s, timeout=10)
        took = time.time() - t0
        stop.set()
        s.close()
        check(status == 408 and "--http-timeout" in error_message(body), f"a trickled head: {status} {head[:100]!r}")
        check(1.5 < took < 4, f"a trickled head answered 408 after {took:.1f} s (--http-timeout 2)")
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        t0 = time.time()
        status, head, body = read_answer(s, timeout=10)
        check(status == 408 and time.time() - t0 < 4, f"a stalled body: {status} after {time.time() - t0:.1f} s")
        s.close()
        s = socket.create_connection(("127.0.0.1", srv.port))
        for i in range(3):
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            status, head, body = read_answer(s)
            check(status == 200, f"keep-alive request {i}: {status}")
        t0 = time.time()
        s.settimeout(10)
        check(s.recv(100) == b"" and time.time() - t0 < 3, "an idle kept-alive connection stayed open")
        s.close()


# ---- what an operator sets: the API key, CORS, the models list, vLLM's metric names ----------

def call(base, method, path, headers=None, body=None, timeout=60):
    """(status, headers, text) of one request, with the headers given (http.client: any method)."""
    import http.client
    host, port = base.split("//")[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.headers, r.read().decode(errors="replace")
    finally:
        conn.close()


# vLLM's metric names linnet writes (docs/serve.md lists them); every one labelled model_name.
VLLM_METRICS = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge", "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:num_preemptions_total": "counter", "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter", "vllm:request_success_total": "counter",
    "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
}


def strict_exposition(text):
    """The text format checked line by line as Prometheus reads it: HELP and TYPE before a
    family's samples, names and labels as the grammar allows, numbers that parse, histogram
    buckets cumulative with +Inf equal to _count. Returns {(sample name, labels): value}."""
    import re
    name_re = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
    label_re = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:\\[\\"n]|[^"\\\n])*"'
    sample_re = re.compile(rf"^({name_re})(?:\{{({label_re}(?:,{label_re})*)\}})? (\S+)$")
    typed, samples, last_bucket = {}, {}, {}
    check(text.endswith("\n"), "the exposition does not end with a line end")
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            check(len(parts) == 4 and re.fullmatch(name_re, parts[2]), f"bad comment line {line!r}")
            if parts[1] == "TYPE":
                check(parts[2] not in typed and parts[3] in ("counter", "gauge", "histogram"), f"bad TYPE {line!r}")
                typed[parts[2]] = parts[3]
            continue
        m = sample_re.match(line)
        check(m, f"not a sample line: {line!r}")
        name, label_text, value = m.group(1), m.group(2) or "", m.group(3)
        value = float(value)  # "+Inf" and "NaN" parse too
        family = next((f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in typed), None)
        check(family is not None, f"{name}: no TYPE line before it")
        labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"', label_text)))
        check((name, labels) not in samples, f"{name}{{{label_text}}} twice")
        samples[(name, labels)] = value
        if name.endswith("_bucket"):
            key = (name, tuple(x for x in labels if x[0] != "le"))
            check(value >= last_bucket.get(key, 0), f"{line!r}: buckets not cumulative")
            last_bucket[key] = value
    for (name, labels), value in samples.items():
        if name.endswith("_count") and typed.get(name[:-6]) == "histogram":
            inf = samples.get((name[:-6] + "_bucket", tuple(sorted(labels + (("le", "+Inf"),)))))
            check(inf == value, f"{name}{labels}: +Inf bucket {inf} != count {value}")
    return samples


def operators_models_and_metrics(srv, c, started, listening, model=NAME):
    """/v1/models with vLLM's fields and the server's start as `created`; /v1/models/{id};
    /metrics holding vLLM's names beside linnet's, read by prometheus_client's parser."""
    import openai
    from prometheus_client.parser import text_string_to_metric_families
    listed = c.models.list().data
    check([m.id for m in listed] == [model], f"models.list: {listed}")
    card = listed[0]
    check(started <= card.created <= listening, f"`created` {card.created} is not the server's start "
                                                f"(between {started} and {listening})")
    extra = card.model_extra or {}
    check(extra.get("root") == MODEL and "parent" in extra and extra["parent"] is None and extra.get("max_model_len") == 64,
          f"vLLM's fields: {extra}")
    perm = extra.get("permission")
    check(isinstance(perm, list) and len(perm) == 1 and perm[0]["object"] == "model_permission"
          and perm[0]["id"].startswith("modelperm-") and perm[0]["allow_sampling"] is True, f"permission: {perm}")
    got = c.models.retrieve(model)
    check(got.id == model and got.created == card.created and got.owned_by == card.owned_by, f"models.retrieve: {got}")
    try:
        c.models.retrieve("another-model")
        raise AssertionError("models.retrieve of another model: accepted")
    except openai.NotFoundError as err:
        check(err.status_code == 404 and "does not exist" in str(err), str(err))
    # Some work to count: two completions, one stopped by a stop string, one streamed.
    c.completions.create(model=model, prompt="Once upon a time", max_tokens=5, temperature=0)
    list(c.completions.create(model=model, prompt="The cat sat", max_tokens=4, temperature=0, stream=True))
    st, head, text = call(srv.base, "GET", "/metrics")
    check(st == 200 and head["Content-Type"].startswith("text/plain; version=0.0.4"), f"/metrics: {st} {head}")
    samples = strict_exposition(text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    parsed = [s for f in families.values() for s in f.samples]

    def value(name, **labels):
        found = [s.value for s in parsed if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        check(len(found) == 1, f"{name}{labels}: {len(found)} samples")
        return found[0]
    for name, kind in VLLM_METRICS.items():
        fam = families.get(name) or families.get(name[:-len("_total")])  # the parser drops a counter's _total
        check(fam is not None and fam.type == kind, f"{name} ({kind}): {fam}")
        check(fam.samples and all(s.labels.get("model_name") == model for s in fam.samples),
              f"{name}: samples without model_name={model!r}: {fam.samples[:3]}")
    lin = {k[0]: v for k, v in samples.items() if k[0].startswith("linnet_") and not k[1]}
    check(value("vllm:generation_tokens_total") == lin["linnet_generation_tokens_total"] > 0, "generation tokens")
    check(value("vllm:prompt_tokens_total") == lin["linnet_prompt_tokens_total"] > 0, "prompt tokens")
    check(value("vllm:num_requests_running") == lin["linnet_requests_running"], "running")
    ok = sum(value("vllm:request_success_total", finished_reason=r) for r in ("stop", "length"))
    check(ok == lin["linnet_requests_finished_total"] >= 2, f"request_success {ok} vs finished")
    check(value("vllm:request_success_total", finished_reason="abort") == lin["linnet_requests_cancelled_total"], "abort")
    check(value("vllm:e2e_request_latency_seconds_count") == ok, "e2e count")
    check(value("vllm:time_to_first_token_seconds_count") == lin["linnet_time_to_first_token_seconds_count"], "ttft")
    check(value("vllm:inter_token_latency_seconds_count") == lin["linnet_inter_token_latency_seconds_count"], "itl")
    check(0 <= value("vllm:kv_cache_usage_perc") <= 1, "kv usage in [0, 1]")
    return samples


def case_operators():
    """What an operator sets, with the openai client and plain HTTP: --api-key (and
    LINNET_API_KEY) as vLLM's Bearer key on /v1/*, CORS (--allowed-origins, preflights answered),
    /v1/models with `created` and /v1/models/{id}, vLLM's metric names. Before: --api-key and
    --allowed-origins were unknown options, /v1/models said created 0, /v1/models/tiny was a
    404, OPTIONS a 404, and /metrics had no vllm: names."""
    import openai
    no_key = {k: v for k, v in os.environ.items() if k != "LINNET_API_KEY"}
    # 1. No key: everything open, as before; the models list and the metrics.
    started = int(time.time())
    with Server(name="operators-open", env=no_key) as srv:
        listening = int(time.time()) + 1
        check("no API key" in srv.tail(), f"the start-up log does not say there is no key:\n{srv.tail()}")
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        operators_models_and_metrics(srv, c, started, listening)
        st, head, _ = call(srv.base, "OPTIONS", "/v1/completions",
                           {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"})
        check("Access-Control-Allow-Origin" not in head, f"CORS answered without --allowed-origins: {st} {head}")
    # 2. A key and one allowed origin.
    key = "sk-linnet-" + "k3y" * 8
    origin = "http://app.example"
    with Server("--api-key", key, "--allowed-origins", json.dumps([origin]), name="operators-key", env=no_key) as srv:
        log = srv.tail()
        check("requires an API key (1 key(s) from --api-key" in log and key not in log, f"start-up log:\n{log}")
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key=key, max_retries=0, timeout=60)
        r = c.completions.create(model=NAME, prompt="Once upon a time", max_tokens=6, temperature=0)
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model=NAME, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True) if ch.choices)
        check(streamed == r.choices[0].text and r.usage.completion_tokens == 6, f"{streamed!r} vs {r.choices[0].text!r}")
        check(c.models.retrieve(NAME).id == NAME, "models.retrieve with the key")
        # A wrong key, or none: 401 {"error": "Unauthorized"}, the client's AuthenticationError.
        for wrong in ("wrong", key[:-1], key + "x", key.upper()):
            bad = openai.OpenAI(base_url=srv.base + "/v1", api_key=wrong, max_retries=0, timeout=60)
            for ask in (lambda: bad.completions.create(model=NAME, prompt="hi", max_tokens=2),
                        lambda: bad.models.list(), lambda: bad.models.retrieve(NAME)):
                try:
                    ask()
                    raise AssertionError(f"key {wrong!r}: accepted")
                except openai.AuthenticationError as err:
                    # The client keeps the body's "error" as err.body.
                    check(err.status_code == 401 and err.body == "Unauthorized", f"{wrong!r}: {err} {err.body!r}")
        before = metrics(srv.base)
        for headers in ({}, {"Authorization": key}, {"Authorization": "Basic " + key}, {"Authorization": "Bearer"},
                        {"Authorization": "Bearer  " + key}, {"Authorization": "Bearer wrong"}):
            for path, body in (("/v1/completions", b'{"prompt": "hi", "max_tokens": 2}'),
                               ("/v1/completions", b"{not json"),  # refused before the body is read as JSON
                               ("/v1/chat/completions", b'{"messages": "not a list"}')):
                st, head, text = call(srv.base, "POST", path, dict(headers, **{"Content-Type": "application/json"}), body)
                check(st == 401 and json.loads(text) == {"error": "Unauthorized"} and head["WWW-Authenticate"] == "Bearer",
                      f"{headers} {path} {body!r}: {st} {text}")
        after = metrics(srv.base)
        for k in ("linnet_prompt_tokens_total", "linnet_requests_finished_total", "linnet_generation_tokens_total"):
            check(after[k] == before[k], f"refused requests cost model work: {k} {before[k]} -> {after[k]}")
        # The scheme in any case, as vLLM; the routes outside /v1 stay open.
        st, _, text = call(srv.base, "POST", "/v1/completions", {"Authorization": "bEaReR " + key},
                           {"prompt": "hi", "max_tokens": 2})
        check(st == 200 and json.loads(text)["usage"]["completion_tokens"] == 2, f"bearer in another case: {st} {text}")
        for method, path, body in (("GET", "/health", None), ("GET", "/metrics", None),
                                   ("POST", "/tokenize", {"prompt": "hi"}), ("POST", "/detokenize", {"tokens": [5]})):
            st, _, text = call(srv.base, method, path, {}, body)
            check(st == 200, f"{path} without a key: {st} {text[:200]}")
        # CORS: a preflight needs no key and is answered 200 for the allowed origin, 400 otherwise.
        st, head, text = call(srv.base, "OPTIONS", "/v1/chat/completions",
                              {"Origin": origin, "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": "authorization, content-type"})
        check(st == 200 and text == "OK" and head["Access-Control-Allow-Origin"] == origin
              and "POST" in head["Access-Control-Allow-Methods"]
              and head["Access-Control-Allow-Headers"] == "authorization, content-type"
              and head["Access-Control-Max-Age"] == "600" and head["Vary"] == "Origin", f"preflight: {st} {head} {text}")
        st, head, text = call(srv.base, "OPTIONS", "/v1/completions",
                              {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        check(st == 400 and text == "Disallowed CORS origin" and "Access-Control-Allow-Origin" not in head,
              f"preflight from another origin: {st} {head} {text}")
        # Answers to the allowed origin name it, streams and 401s too; another origin's get nothing.
        st, head, text = call(srv.base, "POST", "/v1/completions",
                              {"Origin": origin, "Authorization": "Bearer " + key, "Content-Type": "application/json"},
                              {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "stream": True})
        check(st == 200 and head["Access-Control-Allow-Origin"] == origin and head["Content-Type"] == "text/event-stream"
              and text.rstrip().endswith("data: [DONE]"), f"a stream to a browser: {st} {head} {text[-200:]}")
        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        check("".join(ch["choices"][0]["text"] for ch in chunks) == r.choices[0].text, "the stream's text")
        st, head, _ = call(srv.base, "GET", "/v1/models", {"Origin": origin})
        check(st == 401 and head["Access-Control-Allow-Origin"] == origin, f"a 401 to a browser: {st} {head}")
        st, head, _ = call(srv.base, "GET", "/v1/models", {"Origin": "http://evil.example", "Authorization": "Bearer " + key})
        check(st == 200 and "Access-Control-Allow-Origin" not in head, f"another origin: {st} {head}")
        # The same with curl, as docs/serve.md shows it.
        curl = lambda *a: subprocess.run(["curl", "-sS", "--max-time", "60", *a], capture_output=True, text=True, timeout=90)
        r = curl("-H", f"Authorization: Bearer {key}", srv.base + "/v1/models")
        check(r.returncode == 0 and json.loads(r.stdout)["data"][0]["id"] == NAME, f"curl with the key: {r.stdout} {r.stderr}")
        r = curl("-w", "%{http_code}", srv.base + "/v1/models")
        check(r.stdout == '{"error":"Unauthorized"}401', f"curl without the key: {r.stdout!r}")
        r = curl("-D", "-", "-X", "OPTIONS", "-H", f"Origin: {origin}", "-H", "Access-Control-Request-Method: POST",
                 srv.base + "/v1/completions")
        check(r.stdout.startswith("HTTP/1.1 200") and f"Access-Control-Allow-Origin: {origin}" in r.stdout, f"curl preflight: {r.stdout}")
        r = curl("-N", "-D", "-", "-H", f"Authorization: Bearer {key}", "-H", f"Origin: {origin}", srv.base + "/v1/completions",
                 "-d", json.dumps({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "stream": True}))
        check(f"Access-Control-Allow-Origin: {origin}" in r.stdout and r.stdout.rstrip().endswith("data: [DONE]"),
              f"curl stream: {r.stdout[-300:]}")
    # 3. LINNET_API_KEY, two --api-key keys, any origin, a model name with a slash.
    env = dict(os.environ, LINNET_API_KEY="from-the-environment")
    with Server("--allowed-origins", "*", name="operators-env", env=env, model_name="org/tiny") as srv:
        check("1 key(s) from LINNET_API_KEY" in srv.tail(), f"start-up log:\n{srv.tail()}")
        c = openai.OpenAI(base_url=srv.base + "/v1", api_key="from-the-environment", max_retries=0, timeout=60)
        check(c.models.retrieve("org/tiny").id == "org/tiny", "models.retrieve of a name with a slash")
        for path in ("/v1/models/org/tiny", "/v1/models/org%2Ftiny"):
            st, _, text = call(srv.base, "GET", path, {"Authorization": "Bearer from-the-environment"})
            check(st == 200 and json.loads(text)["id"] == "org/tiny", f"{path}: {st} {text}")
        st, head, _ = call(srv.base, "OPTIONS", "/v1/completions",
                           {"Origin": "http://any.example", "Access-Control-Request-Method": "POST",
                            "Access-Control-Request-Headers": "Authorization"})
        check(st == 200 and head["Access-Control-Allow-Origin"] == "*" and head["Access-Control-Allow-Headers"] == "Authorization",
              f"preflight with '*': {st} {head}")
        st, head, _ = call(srv.base, "GET", "/health", {"Origin": "http://any.example"})
        check(st == 200 and head["Access-Control-Allow-Origin"] == "*", f"'*' on an answer: {head}")
        st, _, _ = call(srv.base, "GET", "/v1/models", {"Authorization": "Bearer " + key})
        check(st == 401, "another server's key accepted")
    with Server("--api-key", "first", "second", name="operators-two", env=env) as srv:
        check("2 key(s) from --api-key" in srv.tail(), "--api-key wins over LINNET_API_KEY")
        for k, want in (("first", 200), ("second", 200), ("from-the-environment", 401)):
            st, _, _ = call(srv.base, "GET", "/v1/models", {"Authorization": "Bearer " + k})
            check(st == want, f"key {k!r}: {st}, not {want}")
    # 4. Options that cannot work are refused before the model loads (exit 2, the option named).
    for args, words in ((["--api-key", ""], "--api-key is empty"),
                        (["--allowed-methods", '["GET"]'], "does nothing without --allowed-origins"),
                        (["--allowed-origins", "[1]"], "--allowed-origins must be a JSON list of strings")):
        r = subprocess.run([LINNET, "serve", "--checkpoint", MODEL, "--port", "0", *args], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 2 and words in r.stderr, f"{args}: exit {r.returncode} {r.stderr[-300:]}")
    # 5. The warning for a server that would listen beyond this host without a key: said before it
    # binds, so an address that is not this host's (TEST-NET-1) shows it without opening anything.
    for args, env, warned in (([], no_key, True), (["--api-key", "k"], no_key, False), ([], env, False)):
        r = subprocess.run([LINNET, "serve", "--checkpoint", MODEL, "--port", "0", "--backend", "cpu", "--host", "192.0.2.1",
                            *args], capture_output=True, text=True, timeout=120, env=env)
        check(r.returncode != 0 and "cannot listen on 192.0.2.1" in r.stderr, f"{args}: {r.returncode} {r.stderr[-300:]}")
        check(("is not a loopback address and there is no API key" in r.stderr) == warned, f"{args}: the warning {'missing' if warned else 'given'}: "
                                                            f"{r.stderr[-500:]}")
    print("operators: the key (option, environment, two keys; wrong and missing ones 401 with no model work), CORS "
          "(preflights, streams, 401s), /v1/models/{id} and `created`, vLLM's metric names through prometheus_client, "
          "the warning for a non-loopback host without a key")


CASES = {
    "clients": case_clients,
    "body_limits": case_body_limits,
    "slow_clients": case_slow_clients,
    "operators": case_operators,
    "stories15M": case_stories15m,
    "openai": case_openai,
    "lm_eval": case_lm_eval,
    "load": case_load,
    "faults": case_faults,
    "load-tp2": lambda: case_load(ranks=2, tp=2),
    "faults-tp2": lambda: case_faults(ranks=2, tp=2),
    "replicas": case_replicas,
}

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_cases  # noqa: E402

import reasoning_cases  # noqa: E402

CASES.update(chat_cases.cases(sys.modules[__name__]))
CASES.update(reasoning_cases.cases(sys.modules[__name__]))

if __name__ == "__main__":
    t0 = time.time()
    CASES[CASE]()
    print(f"Serve.{CASE}: passed in {time.time() - t0:.1f} s")
