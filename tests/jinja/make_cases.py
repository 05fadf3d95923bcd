#!/usr/bin/env python3
"""The cases of jinja_tests (tests/jinja_test.cpp): each template and context below is rendered
with Python's jinja2 in transformers' sandbox (ImmutableSandboxedEnvironment, its tojson,
raise_exception, strftime_now, dict and namespace, the loopcontrols and {% generation %}
extensions) and the output, or the kind of error, is written to cases.json beside this file.

    make_cases.py            rewrite cases.json
    make_cases.py --check F  exit 1 unless F still holds what jinja2 says (the conformance test)
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat_templates"))
import render_reference as ref  # noqa: E402

NOW = ref.NOW  # the C++ side formats the same moment (UTC)

TB = {"trim_blocks": True}
LB = {"lstrip_blocks": True}
HF = {"trim_blocks": True, "lstrip_blocks": True}
KT = {"keep_trailing_newline": True}

# Letters whose case Python changes, in blocks whose case mappings have not changed in many
# Unicode versions (so that another Python's cases.json stays the same).
CASED = "".join(
    chr(c)
    for lo, hi in [(0x41, 0x58F), (0x1E00, 0x1FFF), (0x2100, 0x218F), (0x24B6, 0x24E9), (0xFB00, 0xFB17), (0xFF21, 0xFF5A),
                   (0x10400, 0x1044F)]
    for c in range(lo, hi + 1)
    if chr(c).upper() != chr(c) or chr(c).lower() != chr(c) or chr(c).title() != chr(c) or chr(c).isupper() or chr(c).islower())

MSGS = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
D = {"a": 1, "b": [1, 2], "c": {"x": "y"}, "items": "shadowed", "n": None}

CASES = [
    # text, output, comments, whitespace control
    ("plain_text", "Hello, world", {}, {}),
    ("print_name", "Hello {{ name }}!", {"name": "Ann"}, {}),
    ("comment", "a{# note #}b", {}, {}),
    ("comment_strip", "a  {#- note -#}  b", {}, {}),
    ("var_strip", "a  {{- 'x' -}}  \n b", {}, {}),
    ("block_strip", "a \n {%- if true -%} \n b \n {%- endif -%} \n c", {}, {}),
    ("trailing_newline_dropped", "line\n", {}, {}),
    ("trailing_newline_kept", "line\n", {}, KT),
    ("crlf_normalized", "a\r\nb\rc\n", {}, KT),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}, TB),
    ("trim_blocks_comment", "{# c #}\nx", {}, TB),
    ("trim_blocks_plus", "{% if true +%}\nyes{% endif %}", {}, TB),
    ("no_trim_var", "{{ 'a' }}\nb", {}, TB),
    ("lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\n", {}, LB),
    ("lstrip_plus", "  {%+ if true %}x{% endif %}", {}, LB),
    ("lstrip_not_var", "  {{ 'v' }}", {}, LB),
    ("lstrip_after_text", "ab  {% if true %}x{% endif %}", {}, LB),
    ("lstrip_comment", "  {# c #}x", {}, LB),
    ("hf_settings", "{% for m in messages %}\n  {% if m.role == 'user' %}\n    U: {{ m.content }}\n  {% else %}\n    A: {{ m.content }}\n  {% endif %}\n{% endfor %}\n", {"messages": MSGS}, HF),
    ("hf_inline", "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if not loop.last %}, {% endif %}{% endfor %}", {"messages": MSGS}, HF),
    ("lstrip_tab_and_unicode_space", "\t {% if true %}x{% endif %}\u3000{% if true %}y{% endif %}", {}, HF),
    ("raw", "{% raw %}{{ not evaluated }}{% if %}{% endraw %}", {}, {}),
    ("raw_strip", "a {%- raw -%}  {{ x }}  {%- endraw -%} b", {}, {}),
    ("raw_hf", "  {% raw %}\n{{x}}\n  {% endraw %}\nz", {}, HF),
    # literals
    ("string_escapes", r"""{{ 'a\'b' }}|{{ "tab\tnew\nline" }}|{{ '\u00e9\x41\\' }}|{{ 'a' 'b' }}""", {}, {}),
    ("numbers", "{{ 1 }} {{ 1.0 }} {{ 1.5e3 }} {{ 1_000 }} {{ 0x1f }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-7 }} {{ 2.5e16 }} {{ 123456789.0 * 1000 }}", {}, {}),
    ("constants", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}", {}, {}),
    ("list_repr", "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, ('t',), (1, 2), []] }}", {}, {}),
    ("string_repr_quotes", """{{ ["it's", 'say "hi"', 'both \\' "', 'nl\\n', 'é✓'] }}""", {}, {}),
    ("dict_repr", "{{ {'a': 1, 2: 'b', 'c': [none]} }}", {}, {}),
    ("tuple_print", "{{ 1, 2 }}", {}, {}),
    # expressions
    ("arithmetic", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 4 / 2 }}", {}, {}),
    ("precedence", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ not false and false }} {{ 1 ~ 2 + 3 }}", {}, {}),
    ("concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", {}, {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ undefined_name ~ [1] }}", {}, {}),
    ("string_ops", "{{ 'ab' * 3 }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ [0] * 3 }} {{ 3 * 'x' }}", {}, {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }} {{ true == 1 }}", {}, {}),
    ("in_operator", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'cat' }} {{ 3 not in [1] }}", {}, {}),
    ("and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ none or none }}|{{ [] or {} }}", {}, {}),
    ("cond_expr", "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}] {{ 1 if false else 2 if true else 3 }}", {}, {}),
    ("attr_and_item", "{{ d.a }} {{ d['b'][1] }} {{ d.c.x }} {{ d['c']['x'] }} {{ d.b.0 }} [{{ d.missing }}] [{{ d.n }}]", {"d": D}, {}),
    ("attr_prefers_method", "{{ d['items'] }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", {"d": D}, {}),
    ("item_falls_back_to_method", "{{ (d2['keys'] is defined) }} {{ d2['keys']() | list }}", {"d2": {"x": 1}}, {}),
    ("none_attr_is_undefined", "[{{ none.foo }}] {{ none.foo is defined }}", {}, {}),
    ("negative_index", "{{ [1, 2, 3][-1] }} {{ 'hello'[-2] }} [{{ [1][5] }}]", {}, {}),
    ("slices", "{{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3][::-1] }} {{ 'hello'[1:] }} {{ 'hello'[:-1] }} {{ 'hello'[::2] }} {{ [1,2,3,4,5][-2:] }} {{ [1,2,3,4,5][4:1:-2] }}", {}, {}),
    ("unicode_length_slice", "{{ s | length }} {{ s[0] }} {{ s[-1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s | list }}", {"s": "héllo😀世"}, {}),
    ("method_calls", "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a'.lstrip() }}|{{ 'a '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}", {}, {}),
    ("string_methods", "{{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'Hello World'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aXbX'.replace('X', '-') }} {{ 'aXbX'.replace('X', '-', 1) }} {{ 'abcabc'.find('c') }} {{ 'abc'.find('z') }} {{ 'aaa'.count('a') }} {{ '-'.join(['a', 'b']) }} {{ '12'.isdigit() }} {{ 'ab'.isalpha() }}", {}, {}),
    ("str_format", "{{ '{} and {}'.format('a', 1) }} {{ '{0}{0}'.format('x') }} {{ '{name}!'.format(name='n') }} {{ '{:>5}|{:<4}|{:^5}|{:.2f}|{:03d}'.format('r', 'l', 'c', 3.14159, 7) }}", {}, {}),
    ("percent_format", "{{ '%s-%d' % ('a', 3) }} {{ '%05.1f' % 2.25 }} {{ 'x=%s' % none }} {{ '%(a)s' % {'a': 1} }}", {}, {}),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() | list }}", {"d": {"z": 1, "a": 2}}, {}),
    ("list_methods_safe", "{{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }}", {}, {}),
    ("list_append_refused", "{% set l = [] %}{{ l.append(1) }}", {}, {}),
    ("list_pop_refused", "{% set l = [1] %}{% set x = l.pop() %}", {}, {}),
    ("dict_update_refused", "{% set d = {} %}{% set _ = d.update({'a': 1}) %}", {}, {}),
    ("unsafe_attr_prints_empty", "[{{ [].append }}]", {}, {}),
    ("private_attr_hidden", "[{{ 'x'.__class__ }}]", {}, {}),
    # undefined
    ("undefined_prints_empty", "[{{ missing }}] [{{ missing | length }}] [{% for x in missing %}x{% endfor %}] {{ missing is defined }} {{ missing is undefined }} {{ not missing }}", {}, {}),
    ("undefined_attr_error", "{{ missing.attr }}", {}, {}),
    ("undefined_call_error", "{{ missing() }}", {}, {}),
    ("undefined_arith_error", "{{ missing + 1 }}", {}, {}),
    ("undefined_equal", "{{ missing == missing2 }} {{ missing == none }}", {}, {}),
    ("undefined_default", "{{ missing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('x') }} {{ 0 | default(5, boolean=true) }}", {}, {}),
    ("undefined_in_string_filters", "[{{ missing | upper }}{{ missing | trim }}{{ missing | string }}]", {}, {}),
    # control structures
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}, {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}, {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }},{{ loop.nextitem }}]{% endfor %}", {}, {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", {}, {}),
    ("for_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", {}, {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in [1] %}x{% else %}empty{% endfor %}", {}, {}),
    ("for_filter", "{% for x in range(10) if x is odd %}{{ x }}{{ '/' ~ loop.length }} {% endfor %}", {}, {}),
    ("for_unpack", "{% for k, v in [('a', 1), ('b', 2)] %}{{ k }}{{ v }}{% endfor %} {% for a, b in {'x': 1}.items() %}{{ a }}:{{ b }}{% endfor %}", {}, {}),
    ("for_dict_keys", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}, {}),
    ("for_nested_loop", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}", {}, {}),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}, {}),
    ("loop_scope", "{% set x = 1 %}{% for i in range(3) %}{% if i == 0 %}{% set x = 5 %}{% endif %}{{ x }}{% endfor %}{{ x }}", {}, {}),
    ("loop_scope_read_before_set", "{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}, {}),
    ("if_shares_scope", "{% if true %}{% set y = 3 %}{% endif %}{{ y }}", {}, {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }}", {}, {}),
    ("set_block", "{% set body %}  Hi {{ name }}  {% endset %}[{{ body }}]", {"name": "N"}, {}),
    ("set_block_filter", "{% set body | upper | trim %}  hi  {% endset %}[{{ body }}]", {}, {}),
    ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }} {{ ns.found }} [{{ ns.missing }}]", {}, {}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}, {}),
    ("namespace_underscore_refused", "{% set ns = namespace(_x=1) %}", {}, {}),
    ("namespace_set_underscore_refused", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}, {}),
    ("set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}, {}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict([('k', 2)]) }}", {}, {}),
    ("range_global", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}", {}, {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C') }} [{{ greet() }}]", {}, {}),
    ("macro_default_uses_param", "{% macro m(a, b=a ~ '2') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}", {}, {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", {}, {}),
    ("macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}, {}),
    ("macro_unknown_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", {}, {}),
    ("macro_sees_globals_at_call", "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }}{% for i in [1] %}{% set x = 3 %}{{ m() }}{% endfor %}", {}, {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(5) }}", {}, {}),
    ("macro_whitespace_hf", "{%- macro render(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ render(1) }}\n{{ render(2) }}", {}, HF),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}, {}),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}[{{ x }}]{% endcall %}", {}, {}),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}, {}),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }} {% endif %}{% endfor %}", {"messages": MSGS}, HF),
    ("raise_exception", "{% if true %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}", {}, {}),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %-d, %Y %H:%M') }}", {}, {}),
    # tests
    ("tests_types", "{{ 1 is number }}{{ 1.0 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is sequence }}{{ 'a' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}{{ [] is iterable }}{{ 1 is iterable }}{{ none is none }}{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}", {}, {}),
    ("tests_undefined_sequence", "{{ missing is sequence }}{{ missing is iterable }}{{ missing is mapping }}{{ missing is string }}", {}, {}),
    ("tests_numbers", "{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 2 is eq 2 }}{{ 2 is equalto 3 }}{{ 2 is ne 3 }}{{ 1 is lt 2 }}{{ 1 is gt 2 }}{{ 2 is le 2 }}{{ 2 is ge 3 }}{{ 1 is in [1, 2] }}", {}, {}),
    ("tests_not", "{{ 1 is not string }} {{ x is not defined }} {{ not x is defined }}", {}, {}),
    ("tests_case", "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aBc' is lower }}", {}, {}),
    ("tests_callable_sameas", "{{ range is callable }}{{ 1 is callable }}{{ none is sameas none }}{{ false is sameas false }}", {}, {}),
    ("tests_filter_test", "{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}", {}, {}),
    # filters
    ("filter_trim", "[{{ '  a b  ' | trim }}] [{{ 'xxaxx' | trim('x') }}] [{{ '\u3000a\n' | trim }}]", {}, {}),
    ("filter_length", "{{ 'abc' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ 'é😀' | length }}", {}, {}),
    ("filter_length_of_int", "{{ 5 | length }}", {}, {}),
    ("filter_join", "{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ users | join(', ', attribute='name') }} {{ 'abc' | join('-') }}", {"users": [{"name": "a"}, {"name": "b"}]}, {}),
    ("filter_case", "{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello wORLD-foo (bar' | title }} {{ 'hELLO world' | capitalize }} {{ 'ÉCOLE' | lower }}", {}, {}),
    ("filter_replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 123 | replace('2', 'x') }}", {}, {}),
    ("filter_first_last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ 'abc' | last }} [{{ [] | first }}]", {}, {}),
    ("filter_map", "{{ users | map(attribute='name') | list }} {{ ['a', 'b'] | map('upper') | join }} {{ users | map(attribute='age', default=0) | list }} {{ [[1, 2]] | map(attribute='1') | list }}", {"users": [{"name": "a", "age": 3}, {"name": "b"}]}, {}),
    ("filter_select_reject", "{{ range(6) | select('odd') | list }} {{ range(6) | reject('odd') | list }} {{ [0, 1, '', 'a'] | select | list }} {{ range(6) | select('divisibleby', 3) | list }} {{ range(6) | select('gt', 3) | list }}", {}, {}),
    ("filter_selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ msgs | selectattr('flag') | list | length }} {{ msgs | selectattr('flag', 'defined') | list | length }}", {"msgs": [{"role": "user", "content": "u1", "flag": True}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2", "flag": False}]}, {}),
    ("generator_is_truthy", "{{ 'yes' if ([] | select) else 'no' }} {{ 'yes' if ([] | select | list) else 'no' }}", {}, {}),
    ("generator_has_no_length", "{{ [1] | select | length }}", {}, {}),
    ("generator_tojson_refused", "{{ [1] | map('string') | tojson }}", {}, {}),
    ("filter_items", "{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %} [{% for k, v in missing | items %}x{% endfor %}]", {}, {}),
    ("filter_dictsort", "{{ {'b': 1, 'A': 3, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }} {{ {'b': 1, 'A': 3, 'a': 2} | dictsort(true) }}", {}, {}),
    ("filter_list", "{{ 'ab' | list }} {{ {'k': 1} | list }} {{ (1, 2) | list }}", {}, {}),
    ("filter_int_float", "{{ '42' | int }} {{ '42.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ ' 12 ' | int }} {{ '0x1A' | int(0, 16) }} {{ '1.5' | float }} {{ 'a' | float }} {{ 2 | float }} {{ true | int }} {{ none | int }}", {}, {}),
    ("filter_string_abs_round", "{{ 12 | string }}{{ none | string }} {{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 7 | round }}", {}, {}),
    ("filter_indent", "[{{ 'a\nb\n\nc' | indent }}] [{{ 'a\nb' | indent(2, true) }}] [{{ 'a\n\nb' | indent(2, blank=true) }}] [{{ 'a\nb' | indent('> ') }}] [{{ 'x\n' | indent(2) }}]", {}, {}),
    ("filter_unique_sort_reverse", "{{ [3, 1, 2, 1] | unique | list }} {{ ['b', 'A', 'a'] | unique | list }} {{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ users | sort(attribute='age') | map(attribute='name') | join }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }}", {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "z", "age": 3}]}, {}),
    ("filter_min_max_sum", "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | min }} {{ [1, 2, 3] | sum }} {{ users | sum(attribute='age') }} {{ [0.5, 1] | sum(start=1) }} [{{ [] | max }}]", {"users": [{"age": 3}, {"age": 4}]}, {}),
    ("filter_misc", "{{ 'a b  c' | wordcount }} [{{ 'x' | center(5) }}] {{ '<a href=\"x\">&' | escape }} {{ '<b>' | e }} {{ '<b>' | safe }} {{ range(5) | batch(2) | list }} {{ range(5) | batch(2, 'x') | list }} {{ '%s=%s' | format('a', 1) }}", {}, {}),
    ("markup_concat_escapes", "{{ '<b>' | safe + '<i>' }} {{ ('<b>' | safe) ~ '<i>' }}", {}, {}),
    ("filter_attr", "{{ d | attr('a') }}", {"d": {"a": 5}}, {}),
    ("unknown_filter_at_parse", "{{ x | no_such_filter }}", {}, {}),
    ("unknown_filter_in_if_is_fine", "{% if false %}{{ x | no_such_filter }}{% endif %}ok", {}, {}),
    ("unknown_filter_in_if_runs", "{% if true %}{{ x | no_such_filter }}{% endif %}", {}, {}),
    ("unknown_filter_in_loop_in_if", "{% if false %}{% for x in y %}{{ x | no_such_filter }}{% endfor %}{% endif %}", {}, {}),
    ("unknown_test_at_parse", "{{ x is no_such_test }}", {}, {}),
    ("unknown_filter_in_condexpr", "{{ (x | no_such_filter) if false else 'ok' }}", {}, {}),
    # tojson (transformers' json.dumps)
    ("tojson", "{{ d | tojson }}", {"d": {"s": "é\"\n\t<>&'", "i": 1, "f": 1.0, "g": 0.1, "b": True, "n": None, "l": [1, [2]], "e": {}, "el": []}}, {}),
    ("tojson_indent", "{{ d | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ d | tojson(indent='\t') }}", {"d": {"a": [1, {"b": None}], "c": "x"}}, {}),
    ("tojson_sep_sort", "{{ d | tojson(separators=(',', ':')) }} {{ d | tojson(sort_keys=true) }} {{ d | tojson(ensure_ascii=true) }}", {"d": {"z": "é😀", "a": 1}}, {}),
    ("tojson_positional_is_ensure_ascii", "{{ 'é' | tojson(true) }}", {}, {}),
    ("tojson_tuple_and_int_keys", "{{ (1, 'a') | tojson }} {{ {1: 'x', true: 'y', none: 'z'} | tojson }}", {}, {}),
    ("tojson_undefined_refused", "{{ missing | tojson }}", {}, {}),
    ("tojson_large_numbers", "{{ [1e16, 1.5e-5, 123456789012, -0.0, 100.0] | tojson }}", {}, {}),
    # errors with line numbers
    ("syntax_error_unclosed", "line one\n{% if true %}\nno end", {}, {}),
    ("syntax_error_bad_expr", "a\nb {{ 1 + }}", {}, {}),
    ("syntax_error_unknown_tag", "{% frobnicate %}", {}, {}),
    ("syntax_error_endfor_mismatch", "{% for x in y %}{% endif %}", {}, {}),
    ("type_error_str_plus_int", "{{ 'a' + 1 }}", {}, {}),
    ("call_non_callable", "{{ 'a'() }}", {}, {}),
    ("break_outside_loop", "{% break %}", {}, {}),
    ("division_by_zero", "{{ 1 / 0 }}", {}, {}),
    # dicts keyed by Python equality (issue 34 item 5)
    ("dict_keys_equal_numbers", "{{ {1: 'a', 1.0: 'b', True: 'c', 2: 'd'} }} {{ {'a': 1} == {'a': 1.0} }} {{ [1, 1.0, True, 2] | unique | list }}", {}, {}),
    ("dict_many_keys", "{% set d = dict(big) %}{{ d | length }} {{ d['k17'] }} {{ 'k9' in d }} {{ 'k99' in d }} {{ d.get('k3') }} {{ big == d }}", {"big": {f"k{i}": i for i in range(40)}}, {}),
    ("dict_unhashable_in", "{{ [1] in {} }}", {}, {}),
    ("dict_unhashable_key", "{{ {([1], 2): 3} }}", {}, {}),
    ("unique_unhashable", "{{ [[1], [1]] | unique | list }}", {}, {}),
    ("dict_get_unhashable", "{{ {}.get([1]) }}", {}, {}),
    # numbers as Python's (item 8)
    ("int_true_division_exact", "{{ 9223372036854775807 / 3 }} {{ 5258986265376043509 / 888601 }} {{ -4154830492154097476 / 495188 }} {{ 9007199254740993 / 1 }} {{ 0 / -5 }}", {}, {}),
    ("int_float_compare_exact", "{{ 9007199254740993 == 9007199254740992.0 }} {{ 9007199254740993 > 9007199254740992.0 }} {{ 9007199254740993 < 9007199254740994.0 }}", {}, {}),
    ("float_floordiv_mod", "{{ 1 // 0.1 }} {{ 1 % 0.1 }} {{ -4.0 % 2 }} {{ 4.0 % -2 }} {{ -0.0 // 1 }} {{ 0.0 // -1 }} {{ -7.5 // 2 }} {{ 7 % -3.0 }}", {}, {}),
    ("zero_to_negative_power", "{{ 0 ** -1 }}", {}, {}),
    ("float_zero_to_negative_power", "{{ 0.0 ** -2.5 }}", {}, {}),
    ("float_pow_overflow", "{{ 10.0 ** 400 }}", {}, {}),
    ("int_to_negative_power_overflow", "{{ (-1.5) ** 1e300 }}", {}, {}),
    ("float_pow_defined", "{{ 2 ** -2000 }} {{ 10 ** -400 }} {{ 1.5 ** -1e300 }} {{ 0.0 ** 0 }} {{ (-8.0) ** 3.0 }} {{ (-2) ** -1 }}", {}, {}),
    ("division_by_zero_int", "{{ 7 / 0 }}", {}, {}),
    ("division_by_zero_float", "{{ 7.0 / 0 }}", {}, {}),
    ("floordiv_by_zero_float", "{{ 7 // 0.0 }}", {}, {}),
    ("modulo_by_zero_int", "{{ 7 % 0 }}", {}, {}),
    ("round_as_python", "{{ 1250.0|round(-2) }} {{ 1350.0|round(-2) }} {{ 1234.5|round(-2) }} {{ 1250.0001|round(-2) }} {{ -1250.0|round(-2) }} {{ 5e-324|round(330) }} {{ 1e300|round(-299) }} {{ 1e300|round(-301) }} {{ -0.4|round }} {{ 2.675|round(2) }} {{ 0.125|round(2) }}", {}, {}),
    ("round_ints", "{{ 25|round(-1) }} {{ 35|round(-1) }} {{ -25|round(-1) }} {{ 1234|round(-2) }} {{ 4000000000000000000|round(-19) }} {{ 7|round(3) }} {{ 7|round }}", {}, {}),
    ("round_ceil_floor", "{{ 2.5|round(0, 'ceil') }} {{ 2|round(2, 'floor') }} {{ 1.005|round(2, 'ceil') }} {{ 123.456|round(-1, 'floor') }} {{ 15|round(400, 'ceil') }}", {}, {}),
    ("round_ceil_too_precise", "{{ 1.5|round(400, 'ceil') }}", {}, {}),
    ("round_precision_not_int", "{{ 1.5|round(2.5) }}", {}, {}),
    ("int_filter_nan_and_strings", "{{ 'nan'|int(7) }} {{ '1e3'|int }} {{ ' 42 '|int }} {{ '4_2'|int }} {{ 'x'|int(5) }} {{ '-9223372036854775808'|int }} {{ 3.99|int }} {{ -3.99|int }}", {}, {}),
    ("int_filter_inf", "{{ 'inf'|int }}", {}, {}),
    ("percent_d_inf", "{{ '%d' % ('inf'|float) }}", {}, {}),
    ("format_long_precision", "{{ '%.400f' % 1.5 }}|{{ '{:.330f}'.format(1e-320) }}|{{ '{:d}'.format(-9223372036854775807 - 1) }}|{{ '{:x}'.format(-9223372036854775807 - 1) }}|{{ '{:08.3f}'.format(-0.0) }}", {}, {}),
    ("range_and_slice_near_64_bits", "{{ range(9223372036854775806, 9223372036854775807, 10) | list }} {{ range(-9223372036854775807, -9223372036854775807 - 1, -7) | list }} {{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][-1::-9223372036854775807] }}", {}, {}),
    # strings as Python's: full case mappings, the final sigma, lone surrogates (item 8)
    ("case_full_mappings", "{{ 'ß' | upper }} {{ 'ﬁx' | upper }} {{ 'İ' | lower | length }} {{ 'İstanbul' | lower }} {{ 'ß'.title() }} {{ 'ßa'.capitalize() }} {{ 'ﬁx'.title() }} {{ 'ǆb' | title }} {{ 'ǆb'.title() }} {{ 'ΐ' | upper }}", {}, {}),
    ("case_final_sigma", "{% for w in g %}{{ w | lower }}|{{ w.capitalize() }}|{{ w.swapcase() }}|{{ w.title() }}|{{ w | title }}\n{% endfor %}",
     {"g": ["ΣΑΣ ΑΣ. Σ ΑΣ\u0345 ΑΣΑ", "ὈΔΥΣΣΕΎΣ", "ΑΣ'Β", "ΑΣ\u2019Β", "Α\u00adΣ", "ΑΣ\u0301", "αΣ", "Σ", "1Σ", "ªΣ"]}, {}),
    ("case_swapcase_casefold", "{{ 'ǅ'.swapcase() }} {{ 'ß'.swapcase() }} {{ 'ΣΑΣ'.swapcase() }} {{ 'ß'.casefold() }} {{ 'ﬁ'.casefold() }} {{ 'ΣΑΣ'.casefold() }} {{ 'İ'.casefold() | length }}", {}, {}),
    ("case_predicates", "{{ 'ǅ'.isupper() }} {{ 'ǅ'.islower() }} {{ 'ª'.islower() }} {{ 'Ⓐ'.isupper() }} {{ 'ABʰ'.isupper() }} {{ 'abⅰ'.islower() }} {{ 'Ⅰ' is upper }}", {}, {}),
    ("case_every_cased_letter", "{% for c in s %}{{ c.upper() }}{{ c.lower() }}{{ c.title() }}{{ c.swapcase() }}{{ c.casefold() }}{{ c.isupper() | int }}{{ c.islower() | int }} {% endfor %}", {"s": CASED}, {}),
    ("lone_surrogates", "{{ '\\ud800' | length }} {{ '\\ud83d\\ude00' | length }} {{ ('\\ud800' ~ 'a')[1] }} {{ ('a\\udc80b' | list | length) }} {{ '\\ud800' | tojson(ensure_ascii=true) }}", {}, {}),
    ("illegal_unicode_escape", "{{ '\\U00110000' }}", {}, {}),
    ("strftime_long_and_python_directives", "{{ strftime_now('%Y' * 1000) | length }} [{{ strftime_now('%z|%Z|%f|%%z|%') }}] [{{ strftime_now('') }}]", {}, {}),
    # transformers-shaped templates
    ("chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", {"messages": MSGS, "add_generation_prompt": True}, HF),
    ("llama2_style", "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] | trim + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + message['content'] | trim + ' ' + eos_token }}{% endif %}{% endfor %}", {"messages": MSGS, "bos_token": "<s>", "eos_token": "</s>"}, HF),
    ("llama2_style_refuses", "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% endfor %}", {"messages": list(reversed(MSGS))}, HF),
]


def environment(options):
    env = ImmutableSandboxedEnvironment(extensions=[ref.GenerationTag, jinja2.ext.loopcontrols], **options)
    env.filters["tojson"] = ref.tojson
    env.globals["raise_exception"] = ref.raise_exception
    env.globals["strftime_now"] = ref.strftime_now
    env.globals["dict"] = ref.TemplateDict()
    env.globals["namespace"] = ref.TemplateNamespace
    return env


def outcome(template, context, options):
    """What jinja2 makes of it: {"expected": text} or {"error": "syntax" | "raise" | "render"}."""
    try:
        compiled = environment(options).from_string(template)
    except (jinja2.exceptions.TemplateSyntaxError, jinja2.exceptions.TemplateAssertionError, SyntaxError):
        return {"error": "syntax"}
    try:
        return {"expected": compiled.render(**context)}
    except Exception as e:  # noqa: BLE001
        return {"error": "raise" if type(e) is jinja2.exceptions.TemplateError else "render"}


def build():
    cases = []
    for name, template, context, options in CASES:
        case = {"name": name, "template": template}
        if context:
            case["context"] = context
        if options:
            case["options"] = options
        case.update(outcome(template, context, options))
        cases.append(case)
    return cases


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2], encoding="utf-8") as f:
            stored = json.load(f)
        fresh = build()
        bad = [c["name"] for c, s in zip(fresh, stored) if c != s] + (["(count)"] if len(fresh) != len(stored) else [])
        if bad:
            print("make_cases: cases.json is not what jinja2 says for: " + ", ".join(bad))
            sys.exit(1)
        print(f"make_cases: all {len(stored)} jinja_tests cases agree with jinja2 {jinja2.__version__}")
        return
    cases = build()
    with open(os.path.join(here, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"make_cases: wrote {len(cases)} cases")


if __name__ == "__main__":
    main()
