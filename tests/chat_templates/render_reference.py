#!/usr/bin/env python3
"""Renders chat templates as transformers 5.24.0's tokenizer.apply_chat_template(tokenize=False)
does, with Python's jinja2, and writes the cases chat_template_check compares linnet against.

    render_reference.py TEMPLATES_DIR OUT.json

transformers itself is not imported (it would pull in torch and the hub); what it does around
jinja2 is written out here: the environment of chat_template_utils._cached_compile_jinja_template
and the message handling of apply_chat_template / render_jinja_template. Any exception while
rendering is recorded as the case's "error": linnet must refuse that case too.
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Both sides format this moment (chat_template_check runs with TZ=UTC).
NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)

# What transformers passes as **special_tokens_map (the same for every template).
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}…{% endgeneration %}: transformers' AssistantTracker, which renders the body
    unchanged (it only records where the body lands when assistant masks are asked for)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return NOW.strftime(format)


class TemplateDict:
    """The `dict` global: callable, and fromkeys, nothing else."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(jinja2.utils.Namespace):
    """namespace() refusing underscore-prefixed attributes."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace.check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace.check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}."
            )


def compile_template(source):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(source)


def alias_reasoning(chat):
    out = []
    for message in chat:
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def apply_chat_template(source, messages, tools=None, documents=None, add_generation_prompt=False,
                        continue_final_message=False, **kwargs):
    if not messages:
        raise ValueError("Cannot apply chat template to an empty conversation.")
    chat = [{k: v for k, v in m.items() if v is not None} for m in json.loads(json.dumps(messages))]
    if continue_final_message and add_generation_prompt:
        raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
    template_kwargs = {**SPECIAL_TOKENS, **kwargs}
    compiled = compile_template(source)
    chat = alias_reasoning(chat)
    final_message = None
    if continue_final_message:
        field = continue_final_message if isinstance(continue_final_message, str) else "content"
        final_message = chat[-1].get(field)
        if final_message is None:
            raise ValueError(f'the final message has no "{field}" to continue')
        fields = [field]
        if field in REASONING_FIELDS:
            fields = [f for f in REASONING_FIELDS if chat[-1].get(f) == final_message]
        if not any(f in source for f in fields):
            raise ValueError(f'continue_final_message is set to "{field}" but this is not an accepted field')
        elif isinstance(final_message, (list, tuple)):
            for block in reversed(final_message):
                if "text" in block:
                    final_message = block["text"]
                    block["text"] = block["text"] + CONTINUE_TAG
                    break
            else:
                raise ValueError("no text to continue in the final message")
        else:
            for f in fields:
                chat[-1][f] = chat[-1][f] + CONTINUE_TAG
    rendered = compiled.render(messages=chat, tools=tools, documents=documents,
                               add_generation_prompt=add_generation_prompt, **template_kwargs)
    if continue_final_message:
        if final_message.strip() not in rendered or CONTINUE_TAG.strip() not in rendered:
            raise ValueError("the final message does not appear in the chat after applying the chat template")
        at = rendered.rindex(CONTINUE_TAG.strip())
        if rendered[at:at + len(CONTINUE_TAG)] == CONTINUE_TAG:
            rendered = rendered[:at]
        else:
            rendered = rendered[:at].rstrip()
    return rendered


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "max_results": {"type": "integer", "description": "At most this many results"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter tags"},
            },
            "required": ["query"],
        },
    },
}

CONVERSATIONS = {
    "system_user": {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"},
    ]},
    "user_only": {"messages": [{"role": "user", "content": "Hello!"}]},
    "multi_turn": {"messages": [
        {"role": "user", "content": "Hi, can you help me?"},
        {"role": "assistant", "content": "Of course. What do you need?"},
        {"role": "user", "content": "Name three primes.\nJust the numbers."},
        {"role": "assistant", "content": "  2, 3, 5  "},
        {"role": "user", "content": "Thanks!"},
    ]},
    "unicode": {"messages": [
        {"role": "system", "content": "Réponds en français, s'il te plaît — merci."},
        {"role": "user", "content": "你好 👋🏽 ¿qué tal? Ünïcödé \"quotes\" & <tags>"},
        {"role": "assistant", "content": "Très bien ! 日本語もできます 🎉"},
        {"role": "user", "content": "Ελληνικά και русский?"},
    ]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe this"}, {"type": "text", "text": " in one word."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
    ]},
    "tools": {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21°C and clear in Paris."},
        {"role": "user", "content": "Thanks. And London?"},
    ]},
    "tools_prompt": {"tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Tokyo, in fahrenheit?"},
    ]},
    "reasoning": {"kwargs": {"enable_thinking": False}, "messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
        {"role": "user", "content": "And 3+3?"},
    ]},
    "parallel_calls": {"tools": [WEATHER_TOOL, SEARCH_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris and Rome, and search for news."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_b", "type": "function",
             "function": {"name": "search", "arguments": {"query": "news", "max_results": 3, "tags": ["world", "tech"],
                                                          "score": 0.5, "exact": True, "cursor": None}}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny, 25.0 degrees"},
        {"role": "tool", "tool_call_id": "call_b", "content": "[\"headline one\", \"headline two\"]"},
    ]},
    "documents": {"documents": [
        {"title": "Paris", "text": "Paris is the capital of France."},
        {"title": "Rome", "text": "Rome is the capital of Italy."},
    ], "messages": [{"role": "user", "content": "What is the capital of Italy?"}]},
    "thinking_on": {"kwargs": {"enable_thinking": True, "reasoning_effort": "high"}, "messages": [
        {"role": "system", "content": "Think step by step."},
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "No: 91 = 7 × 13.", "thinking": "Try 7: 7 × 13 = 91."},
        {"role": "user", "content": "Is 97?"},
    ]},
}
# Continuing a partial assistant reply (continue_final_message=True), without the prompt.
CONTINUE = {"messages": [
    {"role": "user", "content": "Write a haiku about the sea."},
    {"role": "assistant", "content": "Waves fold into foam"},
]}


def main():
    templates_dir, out_path = sys.argv[1], sys.argv[2]
    names = sorted(f for f in os.listdir(templates_dir) if f.endswith(".jinja"))
    conversations = dict(CONVERSATIONS, continue_final=CONTINUE)
    cases = []
    for name in names:
        with open(os.path.join(templates_dir, name), encoding="utf-8") as f:
            source = f.read()
        for conv_name, conv in conversations.items():
            modes = [(False, True)] if conv_name == "continue_final" else [(False, False), (True, False)]
            for add_generation_prompt, continue_final in modes:
                case = {"template": name, "conversation": conv_name,
                        "add_generation_prompt": add_generation_prompt, "continue_final_message": continue_final}
                try:
                    case["expected"] = apply_chat_template(
                        source, conv["messages"], tools=conv.get("tools"), documents=conv.get("documents"),
                        add_generation_prompt=add_generation_prompt, continue_final_message=continue_final,
                        **conv.get("kwargs", {}))
                except Exception as e:  # noqa: BLE001 - any refusal is a case's outcome
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
    out = {"jinja2": jinja2.__version__, "now": NOW.strftime("%Y-%m-%dT%H:%M:%S"), "special_tokens": SPECIAL_TOKENS,
           "conversations": conversations, "cases": cases}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"render_reference: {len(cases)} cases over {len(names)} templates and {len(conversations)} conversations")


if __name__ == "__main__":
    main()
