"""The server's overhead (a benchmark, not a test): N prompts of mixed lengths, all sent at
once to `linnet serve` (streamed, aiohttp), beside `linnet generate` over the same prompts
file with the same engine limits. Every answer is checked equal to generate's. Prints one
JSON line and a table row for docs/benchmarks.md.

Usage: bench_serve.py LINNET CHECKPOINT N WORKDIR [extra server/generate options…]
"""
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import aiohttp

LINNET, CKPT, N, WORK = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
EXTRA = sys.argv[5:]
os.makedirs(WORK, exist_ok=True)
WORDS = ("once upon a time there was a little girl named Lily she loved to play in the park with her dog "
         "one day the sun was shining and they saw a big red ball under a tree").split()


def prompts():
    rng = random.Random(7)
    out = []
    for i in range(N):
        p = {"id": f"p{i}", "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 40))).capitalize(),
             "max_new_tokens": rng.choice([16, 32, 64, 128])}
        if i % 2:
            p.update(temperature=0.8, seed=i)
        out.append(p)
    return out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


async def client(base, ps):
    results = {}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=1200)) as h:
        async def one(p):
            body = {"prompt": p["text"], "max_tokens": p["max_new_tokens"], "temperature": p.get("temperature", 0),
                    "seed": p.get("seed", 0), "stream": True}
            t0 = time.perf_counter()
            stamps, text = [], ""
            async with h.post(base + "/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
                async for line in r.content:
                    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                        continue
                    ch = json.loads(line[6:])
                    if ch["choices"] and ch["choices"][0]["text"]:
                        stamps.append(time.perf_counter())
                        text += ch["choices"][0]["text"]
            results[p["id"]] = (text, t0, stamps, time.perf_counter())
        t = time.perf_counter()
        await asyncio.gather(*(one(p) for p in ps))
        return results, time.perf_counter() - t


def main():
    ps = prompts()
    src, dst = os.path.join(WORK, "prompts.jsonl"), os.path.join(WORK, "generated.jsonl")
    with open(src, "w") as f:
        for p in ps:
            f.write(json.dumps(p) + "\n")
    r = subprocess.run([LINNET, "generate", "--checkpoint", CKPT, "--prompts", src, "--output", dst, "--overwrite", "--backend", "cpu",
                        *EXTRA], capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) generated in ([\d.]+) s", r.stdout)
    gen_tokens, gen_seconds = int(m.group(1)), float(m.group(2))
    want = {j["id"]: j for j in map(json.loads, open(dst))}

    srv = subprocess.Popen([LINNET, "serve", "--checkpoint", CKPT, "--port", "0", "--backend", "cpu", *EXTRA],
                           stdout=subprocess.PIPE, stderr=open(os.path.join(WORK, "server.log"), "w"), text=True)
    base = None
    for line in srv.stdout:
        if "listening on http://" in line:
            base = line.split("listening on ")[1].split()[0]
            break
    try:
        asyncio.run(client(base, ps[:1]))  # warm
        results, seconds = asyncio.run(client(base, ps))
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=60)
    tokens = 0
    lat, ttft, itl = [], [], []
    for p in ps:
        text, t0, stamps, t1 = results[p["id"]]
        assert text == want[p["id"]]["text"], (p["id"], text, want[p["id"]]["text"])
        tokens += want[p["id"]]["completion_tokens"]
        lat.append(t1 - t0)
        if stamps:
            ttft.append(stamps[0] - t0)
            itl += [b - a for a, b in zip(stamps, stamps[1:])]
    out = {"requests": N, "generated_tokens": tokens, "server_seconds": round(seconds, 3),
           "server_tok_s": round(tokens / seconds, 1), "generate_seconds": gen_seconds,
           "generate_tok_s": round(gen_tokens / gen_seconds, 1), "ratio": round(tokens / seconds / (gen_tokens / gen_seconds), 3),
           "latency_s": {q: round(pct(lat, v), 3) for q, v in (("p50", .5), ("p90", .9), ("p99", .99))},
           "ttft_s": {q: round(pct(ttft, v), 3) for q, v in (("p50", .5), ("p90", .9), ("p99", .99))},
           "itl_ms": {q: round(1000 * pct(itl, v), 2) for q, v in (("p50", .5), ("p90", .9), ("p99", .99))}}
    print(json.dumps(out))
    print(f"| {N} | {tokens} | {out['generate_tok_s']} | {out['server_tok_s']} | {out['ratio']} | "
          f"{out['latency_s']['p50']} / {out['latency_s']['p90']} / {out['latency_s']['p99']} | "
          f"{out['ttft_s']['p50']} / {out['ttft_s']['p99']} | {out['itl_ms']['p50']} / {out['itl_ms']['p99']} |")


main()
