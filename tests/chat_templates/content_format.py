#!/usr/bin/env python3
"""vLLM's "auto" chat template content format, asked of each template, for chat_template_check
to compare with linnet's ChatTemplate::iterates_content (ctest ChatTemplates.content_format).

    content_format.py TEMPLATES_DIR OUT.json      → {"NAME.jinja": "openai" | "string", …}

vLLM (vllm/entrypoints/chat_utils.py, _detect_content_format and the helpers it calls) parses
the template with transformers' jinja2 environment and walks jinja2's tree; this is that walk
written again here (vLLM itself imports torch and the rest of vLLM):
  1. names holding the messages: `messages`, then the target of every `{% set x = … %}` whose
     value reads one of them (the name, through filters, a test or a slice), until none is new;
  2. names holding one message: targets of `{% for … in … %}` over those;
  3. "openai" when some for loop, in the tree's order, iterates a message's `content` (attribute
     or `['content']`, through filters, a test or a slice) or a plain name `content`; else
     "string".
vLLM asserts each such target is a single name and answers its default ("string") when an
assertion or the parse fails; so does this. The template is parsed as render_reference.py
compiles it (transformers' environment: trim_blocks, lstrip_blocks, the generation tag,
loopcontrols).
"""
import json
import os
import sys

import jinja2.nodes as nodes

from render_reference import compile_template


class NotOneName(Exception):
    pass


def is_name(node, name):
    return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name


def reads(node, name, key=None):
    if isinstance(node, (nodes.Filter, nodes.Test)):
        return node.node is not None and reads(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return reads(node.node, name, key)
    if key is None:
        return is_name(node, name)
    if isinstance(node, nodes.Getitem):
        return is_name(node.node, name) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    if isinstance(node, nodes.Getattr):
        return is_name(node.node, name) and node.attr == key
    return False


def one_name(target):
    if not isinstance(target, nodes.Name):
        raise NotOneName()
    return target.name


def content_format(source):
    try:
        tree = compile_template(source).environment.parse(source)
    except Exception:  # noqa: BLE001 - a template jinja2 refuses: the default
        return "string"
    try:
        lists, queue = {"messages"}, ["messages"]
        while queue:
            name = queue.pop(0)
            for assign in tree.find_all(nodes.Assign):
                if reads(assign.node, name):
                    target = one_name(assign.target)
                    if target not in lists:
                        lists.add(target)
                        queue.append(target)
        messages = []
        for loop in tree.find_all(nodes.For):
            if any(reads(loop.iter, name) for name in lists):
                messages.append(one_name(loop.target))
        for loop in tree.find_all(nodes.For):
            if any(reads(loop.iter, m, "content") for m in messages) or (
                    isinstance(loop.iter, nodes.Name) and loop.iter.name == "content"):
                one_name(loop.target)
                return "openai"
    except NotOneName:
        return "string"
    return "string"


def main():
    templates_dir, out_path = sys.argv[1], sys.argv[2]
    out = {}
    for name in sorted(f for f in os.listdir(templates_dir) if f.endswith(".jinja")):
        with open(os.path.join(templates_dir, name), encoding="utf-8") as f:
            out[name] = content_format(f.read())
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print("content_format: %d templates, %d openai, %d string" % (
        len(out), sum(v == "openai" for v in out.values()), sum(v == "string" for v in out.values())))


if __name__ == "__main__":
    main()
