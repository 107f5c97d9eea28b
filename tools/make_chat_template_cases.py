#!/usr/bin/env python3
"""Reference renders for tandem's chat templates (tdm_chat_render), from jinja2.

Renders every tests/chat_templates/*.jinja with deterministic conversations (1-5 messages,
with and without a system message, Unicode content, add_generation_prompt true and false,
some with the roles out of order), plus short inline templates that exercise one feature
each, the way Hugging Face transformers renders chat templates: a sandboxed environment with
trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, `raise_exception`
defined, and a `tojson` filter that keeps non-ASCII text (ensure_ascii=False). Writes
tests/chat_templates/cases.json: per case the template (a file name or the text), the
inputs, and either the expected text or the message of the error the template raises.
tests/unit/test_chat_template.c renders them all and compares exactly.

    .venv/bin/python tools/make_chat_template_cases.py
"""
import datetime
import json
import os
import random
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "tests", "chat_templates")

# (file, bos_token, eos_token, conversations may hold "tool" messages)
TEMPLATES = [
    ("smollm2.jinja", "<|im_start|>", "<|im_end|>", False),
    ("chatml_qwen.jinja", None, "<|im_end|>", False),
    ("qwen25_tools.jinja", None, "<|im_end|>", True),
    ("llama3.jinja", "<|begin_of_text|>", "<|eot_id|>", False),
    ("llama32_like.jinja", "<|begin_of_text|>", "<|eot_id|>", True),
    ("llama2.jinja", "<s>", "</s>", False),
    ("mistral.jinja", "<s>", "</s>", False),
    ("gemma.jinja", "<bos>", "<eos>", False),
    ("gemma3_like.jinja", "<bos>", "<eos>", False),
    ("phi3.jinja", "<s>", "<|endoftext|>", False),
    ("features.jinja", "<s>", "</s>", False),
]

TEXTS = [
    "Hello!",
    "Hi there, how are you?",
    "What is 2 + 2?",
    "  padded with spaces and a newline  \n",
    "héllo wörld — ça va? Ünïcödé àçcènts",
    "Привет, как дела? Всё хорошо.",
    "日本語のテキストです。\u3000全角スペース\u3000",
    "Ελληνικά: καλημέρα κόσμε",
    "emoji 👍🏽 and 🚀 rocket",
    "quotes ' and \" and a \\ backslash",
    "line one\nline two\n\nline four",
    "tab\tseparated\tvalues",
    "\u00a0non-breaking space at both ends\u00a0",
    "",
    "{{ not a template }} {% neither %}",
    "Tell me a joke about <tags> & ampersands.",
    "Sure: here is some code:\n```python\nprint('hi')\n```",
    "ok",
]
TOOL_RESULTS = [
    '{"temperature": 21.5, "unit": "celsius"}',
    "42",
    "Température: 21,5 °C",
]
SYSTEMS = [
    "You are a helpful assistant.",
    "Réponds en français, s'il te plaît.",
    "  Be concise.  ",
    "Ты полезный помощник.",
]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # what transformers' chat template environment installs as `tojson`
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


class Generation(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %}: marks the assistant's text
    (for masks); renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body", [])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def conversations(rng, n, tool_roles=False):
    out = []
    for i in range(n):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
        count = rng.randint(1, 5 - len(msgs))
        for k in range(count):
            role = "user" if k % 2 == 0 else "assistant"
            msgs.append({"role": role, "content": rng.choice(TEXTS)})
        if i % 7 == 6 and len(msgs) >= 2:  # roles out of order: templates that check raise
            msgs[-1]["role"] = msgs[-2]["role"] if msgs[-2]["role"] != "system" else "assistant"
        if tool_roles and i % 3 == 1:  # tool results (one or two in a row) after a user turn
            at = next((k + 1 for k, m in enumerate(msgs) if m["role"] == "user"), len(msgs))
            for _ in range(1 + i % 2):
                msgs.insert(at, {"role": "tool", "content": rng.choice(TOOL_RESULTS)})
        out.append(msgs)
    return out


# Short templates, one feature each, rendered with a fixed conversation.
SNIPPETS = [
    "{{ messages | length }} {{ messages[0].role }} {{ messages[-1]['content'] }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}"
    "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}",
    "{% for m in messages if m.role == 'user' %}[{{ loop.index }} of {{ loop.length }}: {{ m.content }}]"
    "{% else %}none{% endfor %}",
    "{% for m in [] %}x{% else %}empty{% endfor %}",
    "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
    "{% set x = 1 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}",
    "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}"
    "{% endif %}{{ i }}{% endfor %}",
    "{% if 1 > 2 %}a{% elif 2 > 3 %}b{% elif 'x' in 'xyz' %}c{% else %}d{% endif %}",
    "{{ 'a' if false }}|{{ 'b' if true else 'c' }}|{{ none }}|{{ true }}|{{ undefined_name }}|",
    "{{ [1, 'two', none, true, {'k': 'v'}] }} {{ {'a': 1, 'b': [2, 3]} }}",
    "{{ 'it\\'s' }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t'] }}",
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 - 5 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'x' + 'y' }}",
    "{{ 1 == true }} {{ 'a' < 'b' }} {{ 2 >= 2 }} {{ 'b' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
    "{{ 'x' in ['x', 'y'] }} {{ 'z' not in 'xyz' }} {{ 'k' in {'k': 1} }} {{ not false and 0 or 'z' }}",
    "{{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 'a' is string }} "
    "{{ 3 is number }} {{ 3 is integer }} {{ true is boolean }} {{ {} is mapping }} {{ 4 is even }} "
    "{{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is not none }} "
    "{{ 'x' is eq 'x' }} {{ 3 is gt 2 }} {{ [] is iterable }} {{ 'A' is upper }}",
    "{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|"
    "{{ 'hello world' | capitalize }}|{{ 'hello big-world (x)' | title }}|{{ 'abc' | length }}",
    "{{ x | default('dflt') }} {{ '' | default('e', true) }} {{ '' | default('e') }} "
    "{{ none | default('n') }} {{ 0 | d(5, boolean=true) }}",
    "{{ 'é\"\\\\\\n\\t\\u0001ü' | tojson }} {{ [1, 'a', none, true] | tojson }} "
    "{{ {'k': ['v', 2]} | tojson }} {{ messages[0] | tojson }}",
    "{{ [3, 4, 5] | first }} {{ [3, 4, 5] | last }} {{ 'héllo' | first }} {{ 'héllo' | last }} "
    "{{ [] | first }}| {{ [1, 2] | join('-') }} {{ 'abc' | list }} {{ 'abc' | reverse }} "
    "{{ [1, 2] | reverse | list }}",
    "{% for k, v in {'a': 1, 'b': 'two'}.items() %}{{ k }}={{ v }};{% endfor %}"
    "{% for k, v in {'c': 3} | items %}{{ k }}:{{ v }}{% endfor %} {{ {'a': 1}.keys() | list }} "
    "{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('z', 'dz') }} {{ {'a': 1}.get('z') }}",
    "{{ '  s  '.strip() }}|{{ 'xxsxx'.lstrip('x') }}|{{ 'xxsxx'.rstrip('x') }}|"
    "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('lo', 'x')) }} {{ 'hello'.startswith('lo') }}|"
    "{{ ' a  b c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} "
    "{{ 'a b c d'.split(none, 2) }}|{{ 'aXbXc'.replace('X', '-') }} {{ 'Hi'.upper() }} "
    "{{ 'HI'.lower() }} {{ 'hello world'.title() }} {{ '-'.join(['a', 'b']) }} {{ 'abcb'.find('b') }} "
    "{{ 'abcb'.count('b') }}",
    "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} "
    "{{ [1, 2, 3, 4, 5][1:] }} {{ [1, 2, 3, 4, 5][:-2] }} {{ [1, 2, 3, 4, 5][::2] }} "
    "{{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ 'héllo'[1] }} {{ [1, 2][-1] }} {{ [1, 2][5] }}|",
    "{% set greeting %}Hello {{ messages[0].role }}!{% endset %}[{{ greeting }}] {{ greeting | length }}",
    "  {% if true %}\n  indented\n  {% endif %}\n  after\n{# comment #}\n  {# indented comment #}\nend",
    "a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e\n{%+ if true %}kept{% endif %}\n"
    "{% if true +%}\nnewline kept{% endif %}",
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}|"
    "{{ messages | rejectattr('role', 'eq', 'user') | list | length }}|"
    "{{ messages | map(attribute='content') | first }}",
    "{% for m in messages %}{{ loop.cycle('odd', 'even') }}{% if not loop.last %},{% endif %}{% endfor %}"
    " {% for i in [1, 2, 3] %}{{ loop.previtem }}<{{ i }}>{{ loop.nextitem }} {% endfor %}",
    "{% set d = {'role': 'x'} %}{{ d.role }} {{ d['role'] }} {{ d.missing }}|{{ messages[0].nope }}|"
    "{{ 'str'.nope }}|{{ none['x'] }}|",
    "{%- for message in messages -%}\n    {%- if message.role == 'user' -%}\n        U:{{ message.content | trim }}\n"
    "    {%- elif message.role == 'assistant' %}\n        A:{{ message.content | trim }}\n    {% endif -%}\n"
    "{%- endfor %}",
    "{{ 'x' ~ 'y' | upper }} {{ -3 | abs }} {{ '42' | int + 1 }} {{ 'z' | int(7) }} "
    "{{ 5 | string ~ '!' }} {{ 'a,b' | replace(',', ';') }} {{ (1, 2) }} {{ {'a': none} }}",
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system messages: ' ~ messages[0].content) }}"
    "{% endif %}fine",
    "{{ tools is none }} {{ documents }} {{ strftime_now is defined }} {{ range is callable }} "
    "{{ tools is not none and not x }} {% if tools %}tools{% else %}no tools{% endif %}",
    "{% set messages = messages[1:] %}{{ messages | length }}{% for m in messages %}{{ m.role }}{% endfor %}",
    "{{ 'a' is defined and none }}|{{ [] or 'empty' }}|{{ 0 and 1 }}|{{ 'x' and 'y' }}|{{ not messages }}",
    "{%- for m in messages -%}\n  {%- generation -%}{{ m.content | trim }}{%- endgeneration -%}|\n{%- endfor %}",
]

SNIPPET_CONVERSATIONS = [
    [{"role": "system", "content": "Sys prompt"},
     {"role": "user", "content": "  héllo  "},
     {"role": "assistant", "content": "Привет!"},
     {"role": "user", "content": "bye 👋"}],
    [{"role": "user", "content": "only one"}],
]


# Random templates from two small grammars: expressions (operators, filters, tests, methods
# on the values templates see) and layouts (text, tags with whitespace control, comments,
# nested if/for/set) for the lexer's whitespace rules. Kept where jinja2 renders them (its
# errors are compared by the hand-written cases instead). The grammar stays clear of the
# places where jinja2's answer is an accident of its implementation: slices of constants
# (its optimizer folds them), filters that return Python iterators (items, reverse), '%'.
R_LITS = ["1", "0", "-3", "7", "'a'", "'héllo'", "''", "' x '", "none", "true", "false",
          "[1, 2, 3]", "['a', 'b']", "[]", "{'k': 'v'}", "messages", "messages[0]",
          "messages[0].content", "messages[-1]['role']", "x", "ns.a", "(1, 'a')", "'a,b c'",
          "'Ünï ΣΑΣ пРИвет'"]
R_BIN = ["+", "-", "*", "//", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
R_FILT = ["trim", "length", "upper", "lower", "default('d')", "first", "last", "join(',')",
          "list", "string", "tojson", "capitalize", "title", "abs", "default('z', true)",
          "replace('a', 'b')", "trim('a')"]
R_TESTS = ["defined", "none", "string", "number", "integer", "mapping", "iterable", "sequence",
           "boolean", "even", "odd", "true", "false", "lower", "upper", "eq 1", "in [1, 'a']",
           "divisibleby 3", "eq('a')"]
R_METH = [".strip()", ".upper()", ".lower()", ".split()", ".split(',')", ".startswith('a')",
          ".endswith('o')", ".replace('l', 'L')", ".title()", ".get('k')", ".find('l')",
          ".lstrip(' x')", ".rstrip()", ".count('a')", "[0]", "[-1]"]
R_SLICES = ["[1:]", "[::-1]", "[1:3]", "[:-1]", "[::2]", "[-2:]"]


def r_expr(rng, d=0):
    r = rng.random()
    if d > 3 or r < 0.3:
        return rng.choice(R_LITS)
    if r < 0.5:
        return r_expr(rng, d + 1) + " " + rng.choice(R_BIN) + " " + r_expr(rng, d + 1)
    if r < 0.62:
        return "(" + r_expr(rng, d + 1) + ") | " + rng.choice(R_FILT)
    if r < 0.72:
        return "(" + r_expr(rng, d + 1) + ") is " + rng.choice(["", "not "]) + rng.choice(R_TESTS)
    if r < 0.82:
        return "(" + r_expr(rng, d + 1) + ")" + rng.choice(R_METH)
    if r < 0.86:
        return rng.choice(["messages[0].content", "'héllo wörld'", "[1, 2, 3, 4]",
                           "messages"]) + rng.choice(R_SLICES)
    if r < 0.9:
        return "(not " + r_expr(rng, d + 1) + ")"
    if r < 0.95:
        return "(" + r_expr(rng, d + 1) + " if " + r_expr(rng, d + 1) + " else " + r_expr(rng, d + 1) + ")"
    return "[" + r_expr(rng, d + 1) + ", " + r_expr(rng, d + 1) + "]"


def r_expr_template(rng):
    body = "{{ " + r_expr(rng) + " }}"
    if rng.random() < 0.3:
        body = "{% for m in messages %}" + body + "{{ loop.index }}|{% endfor %}"
    return "{% set ns = namespace(a='q') %}{% if " + r_expr(rng) + " %}T{% else %}F{% endif %}" + body


def r_layout(rng, d=0):
    def ws():
        return rng.choice(["", " ", "  ", "\n", " \n", "\n  ", "\t", "\n\n", " \t\n  ", "x",
                           "a b\n", "\n  y  "])

    def tag(body, block=True):
        if block:
            return "{%" + rng.choice(["", "", "-", "+"]) + " " + body + " " + rng.choice(["", "", "-", "+"]) + "%}"
        return "{{" + rng.choice(["", "-"]) + " " + body + " " + rng.choice(["", "-"]) + "}}"

    out = ws()
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.25 or d > 2:
            out += tag(rng.choice(["'v'", "loop.index if loop is defined else 0",
                                   "m.role if m is defined else '-'", "z if z is defined else 1"]), False)
        elif r < 0.45:
            out += tag("if " + rng.choice(["true", "false", "messages | length > 2"])) + r_layout(rng, d + 1)
            if rng.random() < 0.5:
                out += tag("else") + r_layout(rng, d + 1)
            out += tag("endif")
        elif r < 0.65:
            out += (tag("for m in messages" + rng.choice(["", " if m.role != 'system'"])) +
                    r_layout(rng, d + 1) + tag("endfor"))
        elif r < 0.75:
            out += "{#" + rng.choice(["", "-", "+"]) + " c " + rng.choice(["", "-", "+"]) + "#}"
        elif r < 0.85:
            out += tag("set z = " + rng.choice(["'s'", "3"]))
        else:
            out += ws()
        out += ws()
    return out + ("\n" if d == 0 and rng.random() < 0.3 else "")


def render(env, text, msgs, agp, bos, eos):
    try:
        # as transformers renders: tools and documents are None when there are none
        out = env.from_string(text).render(messages=msgs, tools=None, documents=None,
                                           add_generation_prompt=agp,
                                           bos_token=bos if bos is not None else "",
                                           eos_token=eos if eos is not None else "")
        return {"expected": out}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is not jinja2.exceptions.TemplateError:  # syntax / undefined errors
            raise
        return {"error": str(e)}


def main():
    env = environment()
    rng = random.Random(19)
    cases = []
    for name, bos, eos, tool_roles in TEMPLATES:
        with open(os.path.join(DIR, name), encoding="utf-8", newline="") as f:
            text = f.read()
        for msgs in conversations(rng, 14, tool_roles):
            for agp in (False, True):
                case = {"template": name, "bos_token": bos, "eos_token": eos,
                        "add_generation_prompt": agp, "messages": msgs}
                case.update(render(env, text, msgs, agp, bos, eos))
                cases.append(case)
    for text in SNIPPETS:
        for msgs in SNIPPET_CONVERSATIONS:
            case = {"template_text": text, "bos_token": "<s>", "eos_token": "</s>",
                    "add_generation_prompt": True, "messages": msgs}
            case.update(render(env, text, msgs, True, "<s>", "</s>"))
            cases.append(case)
    rng = random.Random(1919)
    kept = {"expr": 0, "layout": 0}
    while kept["expr"] < 400 or kept["layout"] < 300:
        kind = "expr" if kept["expr"] < 400 else "layout"
        text = r_expr_template(rng) if kind == "expr" else r_layout(rng)
        msgs = SNIPPET_CONVERSATIONS[0]
        try:
            case = {"template_text": text, "bos_token": "<s>", "eos_token": "</s>",
                    "add_generation_prompt": True, "messages": msgs}
            case.update(render(env, text, msgs, True, "<s>", "</s>"))
        except Exception:  # jinja2 refuses it: not a case
            continue
        if "expected" in case and " object at 0x" not in case["expected"]:
            cases.append(case)
            kept[kind] += 1
    path = os.path.join(DIR, "cases.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:  # one case a line
        f.write('{"generator": "tools/make_chat_template_cases.py", "jinja2": %s,\n"cases": [\n'
                % json.dumps(jinja2.__version__))
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"{path}: {len(cases)} cases ({n_err} raise an error)")


if __name__ == "__main__":
    sys.exit(main())
