#!/usr/bin/env python3
"""Make lm-evaluation-harness reference fixtures for `linnet eval`.

Writes (see README.md beside this file):

  tests/fixtures/lm_eval/model/          small random HF Llama checkpoint + tokenizer
  tools/lm_eval/tasks/linnet_mc.jsonl    the multiple-choice docs (lm-eval's input)
  tools/lm_eval/tasks/linnet_rolling.jsonl  the rolling-loglikelihood docs
  tests/fixtures/lm_eval/mc.jsonl        the same requests in linnet's eval input format
  tests/fixtures/lm_eval/rolling.jsonl   likewise
  tests/fixtures/lm_eval/expected.json   lm-eval's numbers, token ids and aggregates

It runs lm-eval's own CLI (`lm_eval --model hf ... --log_samples`) fully offline on the
two local tasks in tools/lm_eval/tasks/, then rebuilds every request's token ids with
lm-eval's own functions (HFLM.tok_encode / _encode_pair / prefix_token_id / max_length,
lm_eval.utils.get_rolling_token_windows / make_disjoint_window), recomputes each
loglikelihood with a direct transformers forward over exactly those ids, and fails
unless they equal the CLI's logged numbers to 1e-6.

Run it with `python3 tools/lm_eval/make_fixture.py`: when not already inside
tools/lm_eval/.venv it creates that virtual environment, installs the pinned packages
from PyPI (requirements.txt beside this file) and re-runs itself there.

Deterministic: seeded weights, hand-written documents, one CPU thread; re-running
rewrites byte-identical files.
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
VENV = os.path.join(HERE, ".venv")
VENV_PY = os.path.join(VENV, "bin", "python")
OUT = os.path.join(ROOT, "tests", "fixtures", "lm_eval")
MODEL_DIR = os.path.join(OUT, "model")
TASKS_DIR = os.path.join(HERE, "tasks")
TOKENIZER_SRC = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "hf_bytelevel",
                             "tokenizer.json")
# Paths as written in the task YAMLs (lm-eval / datasets resolve them from the cwd,
# which is the repository root when this script runs lm_eval).
MC_DATA_REL = "tools/lm_eval/tasks/linnet_mc.jsonl"
ROLLING_DATA_REL = "tools/lm_eval/tasks/linnet_rolling.jsonl"

SEED = 20250607
TOL = 1e-6


def ensure_venv():
    """Re-exec inside tools/lm_eval/.venv, creating and filling it when needed."""
    if os.path.abspath(sys.prefix) == os.path.abspath(VENV):
        return
    if not os.path.exists(VENV_PY):
        print(f"[lm_eval] creating {VENV}", flush=True)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    try:
        subprocess.check_call(
            [VENV_PY, "-c", "import lm_eval, torch, transformers, accelerate, safetensors, "
                            "sentencepiece, google.protobuf, datasets"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.CalledProcessError:
        print("[lm_eval] installing packages (torch is large; this can take minutes)", flush=True)
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-r",
                               os.path.join(HERE, "requirements.txt")])
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])


# --------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
MAX_POS = 64
BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|end_of_text|>"


def write_json(path, obj, indent=2):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def tokenizer_specials():
    with open(TOKENIZER_SRC, encoding="utf-8") as f:
        tj = json.load(f)
    added = {t["content"]: t for t in tj["added_tokens"]}
    vocab = tj["model"]["vocab"]
    ids = set(vocab.values()) | {t["id"] for t in tj["added_tokens"]}
    vocab_size = max(ids) + 1
    assert BOS_TOKEN in added and EOS_TOKEN in added, "tokenizer lacks Llama 3 specials"
    return tj, added, vocab_size


def make_model():
    import torch
    from safetensors.torch import save_file

    tj, added, vocab_size = tokenizer_specials()
    bos_id, eos_id = added[BOS_TOKEN]["id"], added[EOS_TOKEN]["id"]
    if os.path.isdir(MODEL_DIR):
        shutil.rmtree(MODEL_DIR)
    os.makedirs(MODEL_DIR)

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": vocab_size,
        "max_position_embeddings": MAX_POS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
    }
    write_json(os.path.join(MODEL_DIR, "config.json"), config)

    g = torch.Generator().manual_seed(SEED)

    def randn(*shape, std):
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * std).contiguous()

    head_dim = HIDDEN // HEADS
    sd = {"model.embed_tokens.weight": randn(vocab_size, HIDDEN, std=0.5)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = 1.0 + randn(HIDDEN, std=0.1)
        sd[p + "self_attn.q_proj.weight"] = randn(HEADS * head_dim, HIDDEN, std=HIDDEN ** -0.5)
        sd[p + "self_attn.k_proj.weight"] = randn(KV_HEADS * head_dim, HIDDEN, std=HIDDEN ** -0.5)
        sd[p + "self_attn.v_proj.weight"] = randn(KV_HEADS * head_dim, HIDDEN, std=HIDDEN ** -0.5)
        sd[p + "self_attn.o_proj.weight"] = randn(HIDDEN, HEADS * head_dim,
                                                  std=(HEADS * head_dim) ** -0.5)
        sd[p + "post_attention_layernorm.weight"] = 1.0 + randn(HIDDEN, std=0.1)
        sd[p + "mlp.gate_proj.weight"] = randn(INTERMEDIATE, HIDDEN, std=HIDDEN ** -0.5)
        sd[p + "mlp.up_proj.weight"] = randn(INTERMEDIATE, HIDDEN, std=HIDDEN ** -0.5)
        sd[p + "mlp.down_proj.weight"] = randn(HIDDEN, INTERMEDIATE, std=INTERMEDIATE ** -0.5)
    sd["model.norm.weight"] = 1.0 + randn(HIDDEN, std=0.1)
    # 1.5 / sqrt(fan_in): logits of the normed final hidden state have std ~1.5.
    sd["lm_head.weight"] = randn(vocab_size, HIDDEN, std=1.5 * HIDDEN ** -0.5)
    save_file(sd, os.path.join(MODEL_DIR, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(MODEL_DIR, "model.safetensors"), 0o644)

    # Tokenizer: tokenizer.json byte for byte; tokenizer_config.json and
    # special_tokens_map.json in the classic (transformers 4 / Llama 3 checkpoint) layout,
    # which transformers 5 also reads (see README: what 5.24's save_pretrained writes).
    shutil.copyfile(TOKENIZER_SRC, os.path.join(MODEL_DIR, "tokenizer.json"))
    added_decoder = {}
    for t in sorted(tj["added_tokens"], key=lambda t: t["id"]):
        added_decoder[str(t["id"])] = {k: t[k] for k in
                                       ("content", "lstrip", "normalized", "rstrip",
                                        "single_word", "special")}
    tok_config = {
        "added_tokens_decoder": added_decoder,
        "bos_token": BOS_TOKEN,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": MAX_POS,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    write_json(os.path.join(MODEL_DIR, "tokenizer_config.json"), tok_config)
    write_json(os.path.join(MODEL_DIR, "special_tokens_map.json"), {
        "bos_token": {"content": BOS_TOKEN, "lstrip": False, "normalized": False,
                      "rstrip": False, "single_word": False},
        "eos_token": {"content": EOS_TOKEN, "lstrip": False, "normalized": False,
                      "rstrip": False, "single_word": False},
    })
    return config, sd


def load_reference(sd):
    """Load the fixture back offline with plain transformers and check it."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(MODEL_DIR, local_files_only=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        MODEL_DIR, dtype=torch.float32, local_files_only=True)
    model.eval()
    loaded = model.state_dict()
    for k, v in sd.items():
        assert k in loaded, f"{k} not loaded"
        assert torch.equal(loaded[k], v), f"{k} differs after loading"
    extra = [k for k in loaded if k not in sd and "rotary" not in k]
    assert not extra, f"unexpected parameters {extra}"
    assert tok.bos_token == BOS_TOKEN and tok.eos_token == EOS_TOKEN
    assert len(tok) == model.config.vocab_size, (len(tok), model.config.vocab_size)
    return tok, model


# --------------------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------------------

LONG_STORY = (
    "Long ago, in a small village between two rivers, there lived an old baker who woke "
    "every morning before the sun. He lit the oven, mixed flour with water and salt, and "
    "sang quietly while the dough rose. Children from the houses nearby would gather at "
    "his window, hoping for a warm roll, and he never sent them away empty handed. One "
    "winter the rivers froze, the mill stopped turning, and the flour ran out. The baker"
)

BOUNDARY_SOURCE = (
    "A careful reader notices that every sentence in this paragraph was written to be "
    "plain and ordinary, so that the tokenizer splits it into many small pieces, and so "
    "that the total number of pieces can be trimmed to an exact count near the model's "
    "limit of sixty four positions without any special characters at all in the text"
)

ROLLING_LONG_1 = (
    "The library opened at nine o'clock, and by ten the reading room was already full. "
    "Students sat in rows with their notebooks open, while an old man in the corner read "
    "the morning paper from the first page to the last. Outside, the rain had started "
    "again, drumming on the tall windows and running down the glass in thin lines. "
    "Nobody seemed to mind; the room was warm, the lamps were bright, and the only sound "
    "besides the rain was the soft turning of pages."
)

ROLLING_LONG_2 = (
    "Chapter one. The ship left the harbour at dawn with forty sailors, a cook, two "
    "cats and a captain who had never lost a crew. For three days the wind was kind. On "
    "the fourth day the sky turned the colour of slate, and the sea rose in long grey "
    "hills that lifted the ship and dropped it again. The captain ordered the sails "
    "taken in and the hatches closed. Below deck the cook tied his pots to the beams and "
    "the cats hid among the barrels of apples. By evening the storm had passed, leaving "
    "a sky full of stars so bright that the sailors could read the names painted on the "
    "lifeboats. They counted each other twice, found that nobody was missing, and the "
    "cook made soup for everyone. In the morning a white bird landed on the mast, which "
    "the old sailors said was the best sign of all. The captain wrote in his log that the "
    "voyage would be a lucky one, and for once the sea agreed with him."
)

ROLLING_NON_ASCII = (
    "Über den Wolken muss die Freiheit wohl grenzenlos sein, sagte die Pilotin. "
    "L'été à Montréal est chaud, et les cafés sont pleins. "
    "東京は日本の首都です。今日はいい天気ですね。 "
    "Emoji time: 😊🎉🚀 — naïve café, façade, jalapeño, Ærøskøbing, €5 or ¥500?"
)

ROLLING_MULTILINE = (
    "Shopping list:\n"
    "- three apples\n"
    "- a loaf of bread\n"
    "\n"
    "Notes:\n"
    "\tCall the plumber on Monday.\n"
    "\tPay the electricity bill before the 15th.\n"
    "\n\n"
    "def greet(name):\n"
    "    return \"Hello, \" + name + \"!\"\n"
)


def mc_base_docs():
    """(id, context, choices, label). Greedy docs are added later from the model."""
    return [
        ("mc-00-plain", "The capital of France is", ["Paris", "London", "Berlin", "Rome"], 0),
        ("mc-01-question", "Question: What color is the sky on a clear day?\nAnswer:",
         ["blue", "green", "red"], 0),
        ("mc-02-trailing-space", "The cat sat on the ", ["mat", "roof", "moon"], 0),
        ("mc-03-trailing-newline", "Which animal barks?\n", ["a dog", "a cat"], 0),
        ("mc-04-trailing-spaces", "Fill in the blank:  ", ["yes", "no"], 1),
        ("mc-05-long-truncated", LONG_STORY,
         ["baked bread from acorns, and the village survived the winter.",
          "left the village.", "slept."], 0),
        # mc-06: context trimmed below to exactly BOUNDARY_CTX_TOKENS tokens.
        ("mc-06-boundary", None, ["many", "a few", "small pieces",
                                  "many many small pieces of text here"], 0),
        ("mc-07-german", "Der Bär läuft über die Straße und", ["schläft", "isst Äpfel",
                                                                 "trinkt Kaffee"], 0),
        ("mc-08-japanese", "東京は日本の", ["首都です", "都市です", "山です"], 0),
        ("mc-09-emoji", "I feel 😊 because", ["it is sunny 🌞", "I won a prize 🎉"], 0),
        ("mc-10-french", "L'été dernier, nous sommes allés à", ["la plage", "Montréal",
                                                                "Zürich"], 1),
        ("mc-11-empty-context", "", ["Hello world", "Goodbye"], 0),
        ("mc-12-bos-prefix", BOS_TOKEN + "Once upon a time", ["there was a king",
                                                              "nothing happened"], 0),
        ("mc-13-numbers", "2 + 2 =", ["4", "5", "22", "four"], 0),
        ("mc-14-whitespace", "Name:\tAlice\nAge:  30\nCity:", ["Paris", "New York"], 0),
    ]


GREEDY_CANDIDATES = [
    "My favourite word is",
    "The weather today is",
    "She opened the door and",
    "In the morning we",
    "He said that",
    "The answer is",
    "Once there was",
    "After dinner they",
    "The number after three is",
    "Please write",
    "It is time to",
    "We walked to the",
    "I think",
    "They went",
    "This is",
    "A man",
]

# mc-06: a context of 61 tokens (incl. BOS) whose choices have 1, 4, 5 and 10 tokens:
# totals 62, 65 (= max_length + 1, fits exactly), 66 (one token truncated) and 71.
BOUNDARY_CTX_TOKENS = 61
BOUNDARY_TOTALS = [62, MAX_POS + 1, MAX_POS + 2, 71]


def trim_to_tokens(source, n, count):
    """The longest word prefix (else character prefix) of source with count() == n."""
    words = source.split(" ")
    for k in range(len(words), 0, -1):
        t = " ".join(words[:k])
        if count(t) == n:
            return t
    for k in range(len(source), 0, -1):
        t = source[:k]
        if count(t) == n and not t.endswith(" "):
            return t
    raise SystemExit(f"no prefix of the source has exactly {n} tokens")


def rolling_docs(count):
    """(id, text); count(text) = len(HFLM.tok_encode(text)) as lm-eval encodes it."""
    def trim_to(source, n):
        return trim_to_tokens(source, n, count)

    return [
        ("r-00-short", "Hello world."),
        ("r-01-one-window", "The quick brown fox jumps over the lazy dog. It was a sunny "
                            "afternoon in the park."),
        ("r-02-exactly-max-length", trim_to(BOUNDARY_SOURCE, MAX_POS)),
        ("r-03-max-length-plus-one", trim_to(BOUNDARY_SOURCE, MAX_POS + 1)),
        ("r-04-long", ROLLING_LONG_1),
        ("r-05-very-long", ROLLING_LONG_2),
        ("r-06-non-ascii", ROLLING_NON_ASCII),
        ("r-07-multiline", ROLLING_MULTILINE),
        ("r-08-odd-spaces", "  Leading spaces,  double  spaces and a trailing one. "),
    ]


# --------------------------------------------------------------------------------------
# Scoring with a direct transformers forward
# --------------------------------------------------------------------------------------

def score(model, ctx, cont, max_length):
    """lm-eval's HFLM._loglikelihood_tokens for one request at batch size 1, recomputed.

    Returns the float32 sum lm-eval computes, is_greedy, the float64 per-token
    log-probs (log-softmax of the float32 logits in float64), and the input ids."""
    import torch
    import torch.nn.functional as F

    inp = (ctx + cont)[-(max_length + 1):][:-1]
    with torch.no_grad():
        logits = model(torch.tensor([inp], dtype=torch.long)).logits[0]
    sel = logits[len(inp) - len(cont):len(inp)]
    lp32 = F.log_softmax(sel, dim=-1)
    cont_t = torch.tensor(cont, dtype=torch.long)
    picked32 = torch.gather(lp32, 1, cont_t[:, None])[:, 0]
    greedy = bool((lp32.argmax(dim=-1) == cont_t).all())
    lp64 = F.log_softmax(sel.double(), dim=-1)
    picked64 = torch.gather(lp64, 1, cont_t[:, None])[:, 0]
    # How far is_greedy is from flipping: per position, the continuation token's logit
    # minus the best other logit; the flag flips only if the smallest of these changes
    # sign, so |min| is its margin.
    other = sel.clone()
    other.scatter_(1, cont_t[:, None], -math.inf)
    margins = torch.gather(sel, 1, cont_t[:, None])[:, 0] - other.max(dim=-1).values
    gap = abs(float(margins.min()))
    return {
        "ll32": float(picked32.sum()),
        "greedy": greedy,
        "lp64": [float(x) for x in picked64],
        "ll64": float(picked64.sum()),
        "input": inp,
        "greedy_margin": gap,
    }


def greedy_choices(model, tok_encode, decode, n_docs):
    """Build choices that are the model's greedy continuation (so is_greedy is true).

    For each candidate context (in order) the model's 3 greedy tokens are generated;
    the longest prefix of them (preferring a different length for each doc found) that
    decodes to " <text>" without broken UTF-8 and re-encodes, after the context, to
    exactly those tokens becomes a choice <text>. A top-1/top-2 logit gap under 1e-3
    is skipped, so another CPU's rounding cannot change the argmax."""
    import torch

    found = []
    for ctx in GREEDY_CANDIDATES:
        if len(found) == n_docs:
            break
        ids = tok_encode(ctx)
        seq = list(ids)
        gaps = []
        for _ in range(3):
            with torch.no_grad():
                logits = model(torch.tensor([seq], dtype=torch.long)).logits[0, -1]
            srt = torch.sort(logits, descending=True).values
            gaps.append(float(srt[0] - srt[1]))
            seq.append(int(logits.argmax()))
        used = {k for _, _, k in found}
        for k in sorted((3, 2, 1), key=lambda k: (k in used, -k)):
            gen = seq[len(ids):len(ids) + k]
            text = decode(gen)
            if (not text.startswith(" ") or "\ufffd" in text or len(text) < 2
                    or text[1].isspace() or text != text.rstrip()):
                continue
            if min(gaps[:k]) < 1e-3:
                continue
            whole = tok_encode(ctx + text)
            if whole[:len(ids)] != ids or whole[len(ids):] != gen:
                continue
            found.append((ctx, text[1:], k))
            break
    if len(found) < n_docs:
        raise SystemExit(f"only {len(found)} greedy-choice docs found; add candidates")
    return found


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

TASK_MC_YAML = """\
# Written by tools/lm_eval/make_fixture.py; run lm_eval from the repository root.
task: linnet_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: context
doc_to_choice: choices
doc_to_target: label
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

TASK_ROLLING_YAML = """\
# Written by tools/lm_eval/make_fixture.py; run lm_eval from the repository root.
task: linnet_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: text
metric_list:
  - metric: word_perplexity
    aggregation: weighted_perplexity
    higher_is_better: false
  - metric: byte_perplexity
    aggregation: weighted_perplexity
    higher_is_better: false
  - metric: bits_per_byte
    aggregation: bits_per_byte
    higher_is_better: false
metadata:
  version: 1.0
"""


def as_bool(v):
    """--log_samples writes resps as strings ("True"/"False")."""
    if isinstance(v, bool):
        return v
    assert v in ("True", "False"), v
    return v == "True"


def offline_env(tmp):
    env = dict(os.environ)
    env.update({
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": os.path.join(tmp, "hf_home"),
        "HF_DATASETS_CACHE": os.path.join(tmp, "hf_datasets"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
    })
    env.pop("HF_TOKEN", None)
    return env


def run_cli(tmp):
    out_dir = os.path.join(tmp, "lm_eval_out")
    cmd = [os.path.join(VENV, "bin", "lm_eval"),
           "--model", "hf",
           "--model_args", f"pretrained={os.path.relpath(MODEL_DIR, ROOT)},dtype=float32",
           "--device", "cpu",
           "--tasks", "linnet_mc,linnet_rolling",
           "--include_path", os.path.relpath(TASKS_DIR, ROOT),
           "--log_samples",
           "--output_path", out_dir,
           "--batch_size", "1"]
    print("[lm_eval] " + " ".join(cmd), flush=True)
    log_path = os.path.join(tmp, "lm_eval.log")
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, cwd=ROOT, env=offline_env(tmp), stdout=log,
                             stderr=subprocess.STDOUT)
    with open(log_path) as f:
        log_text = f.read()
    if rc != 0:
        sys.stderr.write(log_text[-8000:])
        raise SystemExit(f"lm_eval failed with exit code {rc}")
    results = glob.glob(os.path.join(out_dir, "**", "results_*.json"), recursive=True)
    assert len(results) == 1, results
    with open(results[0], encoding="utf-8") as f:
        res = json.load(f)
    samples = {}
    for task in ("linnet_mc", "linnet_rolling"):
        files = glob.glob(os.path.join(out_dir, "**", f"samples_{task}_*.jsonl"),
                          recursive=True)
        assert len(files) == 1, files
        with open(files[0], encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        samples[task] = sorted(rows, key=lambda r: r["doc_id"])
    return res, samples, log_text


def main():
    ensure_venv()
    tmp = tempfile.mkdtemp(prefix="linnet_lm_eval_")
    # The same offline, single-thread environment in this process as for the CLI.
    env = offline_env(tmp)
    os.environ.clear()
    os.environ.update(env)

    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    import transformers
    import lm_eval
    from lm_eval import utils as lm_utils
    from lm_eval.api.task import Task
    from lm_eval.models.huggingface import HFLM
    from lm_eval.api.metrics import weighted_perplexity, bits_per_byte
    import importlib.metadata as md

    os.makedirs(OUT, exist_ok=True)
    os.makedirs(TASKS_DIR, exist_ok=True)
    config, sd = make_model()
    tok, model = load_reference(sd)

    # lm-eval's own model wrapper, used here for its tokenization rules only.
    lm = HFLM(pretrained=MODEL_DIR, dtype="float32", device="cpu", batch_size=1)
    max_length = lm.max_length
    prefix_id = lm.prefix_token_id
    assert max_length == MAX_POS, max_length

    def count(text):
        return len(lm.tok_encode(text))

    # ---- documents -------------------------------------------------------------------
    mc = []
    for doc_id, ctx, choices, label in mc_base_docs():
        if ctx is None:  # boundary doc: exactly BOUNDARY_CTX_TOKENS tokens
            ctx = trim_to_tokens(BOUNDARY_SOURCE, BOUNDARY_CTX_TOKENS, count)
            totals = [len(sum(lm._encode_pair(ctx, " " + c), [])) for c in choices]
            assert totals == BOUNDARY_TOTALS, totals
        mc.append({"id": doc_id, "context": ctx, "choices": choices, "label": label})
    for i, (ctx, choice, k) in enumerate(greedy_choices(
            model, lm.tok_encode, lambda ids: tok.decode(ids), 3)):
        mc.append({"id": f"mc-{15 + i:02d}-greedy-{k}tok", "context": ctx,
                   "choices": [choice, "banana bread"], "label": 0})
    rolling = [{"id": i, "text": t} for i, t in rolling_docs(count)]
    write_jsonl(os.path.join(ROOT, MC_DATA_REL), mc)
    write_jsonl(os.path.join(ROOT, ROLLING_DATA_REL), rolling)
    with open(os.path.join(TASKS_DIR, "linnet_mc.yaml"), "w") as f:
        f.write(TASK_MC_YAML.format(data=MC_DATA_REL))
    with open(os.path.join(TASKS_DIR, "linnet_rolling.yaml"), "w") as f:
        f.write(TASK_ROLLING_YAML.format(data=ROLLING_DATA_REL))

    # ---- what this transformers' save_pretrained makes of the tokenizer --------------
    saved_dir = os.path.join(tmp, "tokenizer_saved")
    tok.save_pretrained(saved_dir)
    with open(os.path.join(saved_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        saved_config = json.load(f)
    saved_tok = transformers.AutoTokenizer.from_pretrained(saved_dir, local_files_only=True)
    texts = [d["context"] + " " + c for d in mc for c in d["choices"]] + \
            [d["text"] for d in rolling]
    for t in texts:
        assert saved_tok.encode(t) == tok.encode(t), t
        assert saved_tok.encode(t, add_special_tokens=False) == \
            tok.encode(t, add_special_tokens=False), t
    tokenizer_save_pretrained = {
        "files": sorted(os.listdir(saved_dir)),
        "tokenizer_config": saved_config,
        "same_ids_as_fixture_tokenizer": True,
    }

    # ---- lm-eval CLI -----------------------------------------------------------------
    res, samples, log_text = run_cli(tmp)

    # ---- multiple choice: rebuild the requests, recompute, compare -------------------
    max_dev = 0.0
    max_dev64 = 0.0
    min_gap = math.inf
    mc_out, mc_linnet = [], []
    assert len(samples["linnet_mc"]) == len(mc)
    for s, doc in zip(samples["linnet_mc"], mc):
        assert s["doc"]["id"] == doc["id"], (s["doc"]["id"], doc["id"])
        args = [s["arguments"][f"gen_args_{i}"] for i in range(len(s["arguments"]))]
        assert len(args) == len(doc["choices"])
        reqs = []
        conts = []
        for j, (a, resp) in enumerate(zip(args, s["resps"])):
            context, continuation = a["arg_0"], a["arg_1"]
            assert continuation == " " + doc["choices"][j]
            assert context == doc["context"]
            ll_cli, greedy_cli = float(resp[0][0]), as_bool(resp[0][1])
            if context == "":
                cont_enc = lm.tok_encode(continuation, add_special_tokens=False)
                if prefix_id != cont_enc[0]:
                    ctx_enc = [prefix_id]
                else:
                    ctx_enc, cont_enc = cont_enc[:1], cont_enc[1:]
                moved = ""
            else:
                ctx_enc, cont_enc = lm._encode_pair(context, continuation)
                moved = context[len(context.rstrip()):]
            r = score(model, ctx_enc, cont_enc, max_length)
            dev = abs(r["ll32"] - ll_cli)
            if dev > TOL or r["greedy"] != greedy_cli:
                raise SystemExit(f"{doc['id']} choice {j}: recomputed {r['ll32']!r} "
                                 f"greedy {r['greedy']} vs lm-eval {ll_cli!r} {greedy_cli}")
            max_dev = max(max_dev, dev)
            max_dev64 = max(max_dev64, abs(r["ll64"] - ll_cli))
            min_gap = min(min_gap, r["greedy_margin"])
            whole = (lm.tok_encode(context.rstrip() + moved + continuation)
                     if context else None)
            conts.append(continuation)
            reqs.append({
                "continuation": continuation,
                "loglikelihood": ll_cli,
                "is_greedy": greedy_cli,
                "loglikelihood_f64": r["ll64"],
                "token_logprobs_f64": r["lp64"],
                "context_enc": ctx_enc,
                "continuation_enc": cont_enc,
                "trailing_whitespace_moved": moved,
                "context_split_mismatch": (whole is not None and
                                           whole[:len(ctx_enc)] != ctx_enc),
                "truncated": len(ctx_enc) + len(cont_enc) > max_length + 1,
                "model_input": r["input"],
            })
        acc = s.get("acc")
        mc_out.append({"id": doc["id"], "doc_id": s["doc_id"], "context": doc["context"],
                       "label": doc["label"], "acc": acc, "requests": reqs})
        mc_linnet.append({"id": doc["id"], "context": doc["context"], "continuation": conts})

    # ---- rolling ---------------------------------------------------------------------
    rolling_out, rolling_linnet = [], []
    items_w, items_b = [], []
    assert len(samples["linnet_rolling"]) == len(rolling)
    for s, doc in zip(samples["linnet_rolling"], rolling):
        assert s["doc"]["id"] == doc["id"]
        text = s["arguments"]["gen_args_0"]["arg_0"]
        assert text == doc["text"]
        ll_cli = float(s["resps"][0][0])
        tokens = lm.tok_encode(text)
        windows = list(map(lm_utils.make_disjoint_window,
                           lm_utils.get_rolling_token_windows(
                               token_list=tokens, prefix_token=prefix_id,
                               max_seq_len=max_length, context_len=1)))
        total32, total64, win_out = 0.0, 0.0, []
        for ctx_w, pred_w in windows:
            r = score(model, ctx_w, pred_w, max_length)
            total32 += r["ll32"]
            total64 += r["ll64"]
            win_out.append({"context": ctx_w, "scored": pred_w, "loglikelihood": r["ll32"],
                            "token_logprobs_f64": r["lp64"]})
        dev = abs(total32 - ll_cli)
        if dev > TOL:
            raise SystemExit(f"{doc['id']}: recomputed {total32!r} vs lm-eval {ll_cli!r}")
        max_dev = max(max_dev, dev)
        max_dev64 = max(max_dev64, abs(total64 - ll_cli))
        words = Task.count_words(text)
        nbytes = Task.count_bytes(text)
        wp = s.get("word_perplexity")
        bp = s.get("byte_perplexity")
        assert wp is not None and bp is not None, sorted(s.keys())
        assert wp[1] == words and bp[1] == nbytes, (wp, bp, words, nbytes)
        assert abs(wp[0] - ll_cli) == 0.0
        scored = sum(len(p) for _, p in windows)
        assert scored == len(tokens)
        items_w.append((ll_cli, words))
        items_b.append((ll_cli, nbytes))
        rolling_out.append({"id": doc["id"], "doc_id": s["doc_id"], "text": text,
                            "loglikelihood": ll_cli, "loglikelihood_f64": total64,
                            "tokens_scored": scored, "words": words, "bytes": nbytes,
                            "token_ids": tokens, "windows": win_out})
        rolling_linnet.append({"id": doc["id"], "text": text})

    agg = res["results"]["linnet_rolling"]
    agg_out = {
        "word_perplexity": agg["word_perplexity,none"],
        "byte_perplexity": agg["byte_perplexity,none"],
        "bits_per_byte": agg["bits_per_byte,none"],
    }
    recomputed = {
        "word_perplexity": weighted_perplexity(items_w),
        "byte_perplexity": weighted_perplexity(items_b),
        "bits_per_byte": bits_per_byte(items_b),
    }
    by_hand = {
        "word_perplexity": math.exp(-sum(a for a, _ in items_w) / sum(b for _, b in items_w)),
        "byte_perplexity": math.exp(-sum(a for a, _ in items_b) / sum(b for _, b in items_b)),
        "bits_per_byte": -sum(a for a, _ in items_b) / sum(b for _, b in items_b) / math.log(2),
    }
    for k in agg_out:
        assert abs(agg_out[k] - recomputed[k]) <= 1e-9 * max(1.0, abs(agg_out[k])), k
        assert abs(agg_out[k] - by_hand[k]) <= 1e-9 * max(1.0, abs(agg_out[k])), k
    mc_acc = res["results"]["linnet_mc"].get("acc,none")

    # ---- BOS / prefix facts ----------------------------------------------------------
    probe = lm.tok_encode("Hello")
    adds_bos = probe[0] == tok.bos_token_id
    greedy_true = sum(r["is_greedy"] for d in mc_out for r in d["requests"])
    n_trunc = sum(r["truncated"] for d in mc_out for r in d["requests"])
    n_mismatch = sum(r["context_split_mismatch"] for d in mc_out for r in d["requests"])

    versions = {p: md.version(p) for p in ("lm_eval", "torch", "transformers", "accelerate",
                                           "datasets", "tokenizers", "safetensors",
                                           "sentencepiece", "protobuf", "numpy")}
    expected = {
        "generator": "tools/lm_eval/make_fixture.py",
        "lm_eval_version": lm_eval.__version__ if hasattr(lm_eval, "__version__")
        else versions["lm_eval"],
        "versions": versions,
        "command": ("lm_eval --model hf --model_args pretrained=tests/fixtures/lm_eval/model,"
                    "dtype=float32 --device cpu --tasks linnet_mc,linnet_rolling "
                    "--include_path tools/lm_eval/tasks --log_samples --output_path <tmp> "
                    "--batch_size 1"),
        "model": "tests/fixtures/lm_eval/model",
        "max_length": max_length,
        "prefix_token_id": prefix_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "eot_token_id": lm.eot_token_id,
        "adds_bos_when_encoding": adds_bos,
        "rolling_token_list_starts_with_bos": all(d["token_ids"][0] == tok.bos_token_id
                                                  for d in rolling_out),
        "rolling_context_len": 1,
        "target_delimiter": " ",
        "loglikelihood_note": ("loglikelihood: lm-eval's value (natural log, float32 "
                               "log_softmax summed in float32 per request/window, windows "
                               "summed in Python float); loglikelihood_f64: the same "
                               "tokens with log_softmax and sum in float64 from the "
                               "float32 logits"),
        "checks": {
            "max_abs_recomputed_vs_lm_eval": max_dev,
            "max_abs_f64_vs_lm_eval": max_dev64,
            "tolerance": TOL,
            "min_is_greedy_logit_margin": min_gap,
            "mc_requests": sum(len(d["requests"]) for d in mc_out),
            "mc_requests_is_greedy": greedy_true,
            "mc_requests_truncated": n_trunc,
            "mc_requests_context_split_mismatch": n_mismatch,
            "rolling_windows": sum(len(d["windows"]) for d in rolling_out),
        },
        "tokenizer_save_pretrained": tokenizer_save_pretrained,
        "mc": {"task": "linnet_mc", "acc": mc_acc, "docs": mc_out},
        "rolling": {"task": "linnet_rolling", "aggregates": agg_out, "docs": rolling_out},
    }
    write_json(os.path.join(OUT, "expected.json"), expected, indent=1)
    write_jsonl(os.path.join(OUT, "mc.jsonl"), mc_linnet)
    write_jsonl(os.path.join(OUT, "rolling.jsonl"), rolling_linnet)
    if not os.environ.get("LINNET_LM_EVAL_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"[lm_eval] kept {tmp}", flush=True)

    print(f"[lm_eval] lm-eval {versions['lm_eval']}, max_length {max_length}, prefix token "
          f"{prefix_id}, BOS added {adds_bos}", flush=True)
    print(f"[lm_eval] {expected['checks']}", flush=True)
    print(f"[lm_eval] aggregates {agg_out}", flush=True)


if __name__ == "__main__":
    main()
