#!/usr/bin/env python3
"""End-to-end tests of `tandem serve`'s OpenAI API with the real `openai` Python client.

The test writes the tiny random Llama (tools/make_tiny_llama.py) into a temporary model
repository as a language model (config.pbtxt with backend "tandem_llm", the folder in tiny/1),
starts the server on 127.0.0.1 with free ports and checks: /v1/models; completions and chat,
streaming and not; greedy text and usage identical to `tandem generate` for the same prompt;
stop strings (cut before the match, also across streamed chunks); seed reproducibility;
logprobs; errors as OpenAI error objects (malformed bodies, wrong types, unknown model, n > 1,
a prompt longer than the context) after which the server still serves; 100 concurrent
streaming clients with random lengths and random disconnects, after which every request has
ended and the KV pool is back to full (read on /metrics); the LLM metrics; the KServe side
(repository index, infer refused); an unload that cancels a running stream, and a reload;
kv_cache_dtype: the same folder loaded with a float16 pool answers the float32 one's greedy
text (log-probabilities within 5e-2: keys and values rounded to float16; a token may differ
at a near tie of the float32 one's top two, after which the texts part), its pool holds twice
the blocks in kv_memory_mb and /metrics says float16 and the bytes; an int4 pool answers `tandem
generate --kv-type int4`'s greedy text, with its blocks and bytes on /metrics; a bad value fails the load
with a 400 naming it.

Usage: test_openai.py --tandem BUILD/tandem [--keep] [--filter SUBSTRING] [--smol DIR]
--smol DIR (e.g. /work/smol, not in CI: slow) adds that folder as the model "smol" and checks
its greedy chat and completion text against `tandem generate`, alone and 4 at once.
Prints one line per test and "N passed, N failed" at the end; exits 1 on any failure.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

try:
    import openai
except ImportError:
    print("SKIPPED: the openai package is missing from .venv (.venv/bin/pip install -r tools/requirements.txt)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "tiny"
PY = sys.executable


def add_smol(repo, folder):
    d = os.path.join(repo, "smol", "1")
    os.makedirs(d)
    for f in os.listdir(folder):  # files linked: a folder link leading out of the repository is refused
        os.symlink(os.path.join(os.path.abspath(folder), f), os.path.join(d, f))
    with open(os.path.join(repo, "smol", "config.pbtxt"), "w") as f:
        f.write('backend: "tandem_llm"\nparameters { key: "kv_memory_mb" value { string_value: "256" } }\n')
    return d


def make_repository(repo):
    folder = os.path.join(repo, MODEL, "1")
    subprocess.run([PY, os.path.join(ROOT, "tools", "make_tiny_llama.py"), folder], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(repo, MODEL, "config.pbtxt"), "w") as f:
        f.write('backend: "tandem_llm"\n'
                'parameters { key: "max_batch" value { string_value: "8" } }\n'
                'parameters { key: "threads" value { string_value: "1" } }\n')
    return folder


class Server:
    def __init__(self, tandem, repo):
        self.lines = []
        self.proc = subprocess.Popen(
            [tandem, "serve", "--model-repository", repo, "--http-port", "0", "--metrics-port", "0",
             "--shutdown-timeout", "20"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline:
            for line in list(self.lines):
                m = re.search(r"HTTP on [^ ]+:(\d+), metrics on [^ ]+:(\d+)", line)
                if m:
                    self.port, self.metrics_port = int(m.group(1)), int(m.group(2))
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + "".join(self.lines))
            if self.port and any(l.rstrip().endswith("tandem serve: ready") for l in self.lines):
                return
            time.sleep(0.05)
        self.proc.kill()  # a server that never became ready must not outlive the test run
        self.proc.wait()
        raise RuntimeError("server did not become ready:\n" + "".join(self.lines))

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def raw(port, method, path, body=b"", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def metrics(server):
    st, _, body = raw(server.metrics_port, "GET", "/metrics")
    assert st == 200
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, v = line.rsplit(" ", 1)
        out[k] = float(v)
    return out


def metric(m, name, **labels):
    lab = ",".join([f'model="{MODEL}"', 'version="1"'] + [f'{k}="{v}"' for k, v in labels.items()])
    return m[f"{name}{{{lab}}}"]


def generate(tandem, folder, prompt, max_tokens, chat, kv_type="auto", extra=()):
    out = subprocess.run([tandem, "generate", folder, "--prompt", prompt, "--max-tokens", str(max_tokens),
                          "--chat" if chat else "--no-chat", "--json", "--threads", "1", "--kv-type", kv_type,
                          *extra], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


class Tests:
    def __init__(self, server, tandem, folder, smol=None):
        self.smol = smol
        self.s = server
        self.tandem = tandem
        self.folder = folder
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none",
                                    max_retries=0, timeout=120)

    # -- basics ------------------------------------------------------------------------------

    def test_models(self):
        ids = [m.id for m in self.client.models.list().data]
        assert ids == ([MODEL, "smol"] if self.smol else [MODEL]), ids
        m = self.client.models.retrieve(MODEL)
        assert m.id == MODEL and m.owned_by == "tandem"
        try:
            self.client.models.retrieve("nope")
            raise AssertionError("no error")
        except openai.NotFoundError as e:
            assert e.status_code == 404

    def test_completion_greedy_matches_generate(self):
        refs = {}
        for prompt in ["Once upon a time", "The quick brown fox", "Hello there"]:
            ref = refs[prompt] = generate(self.tandem, self.folder, prompt, 20, chat=False)
            r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0)
            c = r.choices[0]
            assert c.text == ref["text"], (prompt, c.text, ref["text"])
            assert r.usage.prompt_tokens == ref["prompt_tokens"], (r.usage, ref)
            assert r.usage.completion_tokens == ref["generated_tokens"], (r.usage, ref)
            assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
            want = "length" if ref["stop_reason"] == "max_tokens" else "stop"
            assert c.finish_reason == want, (c.finish_reason, ref["stop_reason"])
            assert r.object == "text_completion" and r.model == MODEL and r.id.startswith("cmpl-")
        # the same, all at once (one batch in the engine): the same text and the same printed
        # log-probabilities as each prompt alone through the server (a step holding several
        # prompts' prefills computes every row as it does alone: the int8-activation panel loops
        # for any number of rows, norms and attention per row; before, more than 16 rows took
        # the float-activation panels and the values differed by ~1e-2)
        alone = {p: self.client.completions.create(model=MODEL, prompt=p, max_tokens=20, temperature=0,
                                                   logprobs=2).choices[0] for p in refs}
        got = {}

        def run(k, prompt):
            got[k] = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=20,
                                                    temperature=0, logprobs=2).choices[0]

        threads = [threading.Thread(target=run, args=((i, p), p)) for i in range(3) for p in refs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == len(threads)
        for (i, p), c in got.items():
            assert c.text == refs[p]["text"], (p, c.text, refs[p]["text"])
            assert c.logprobs.token_logprobs == alone[p].logprobs.token_logprobs, (
                p, c.logprobs.token_logprobs, alone[p].logprobs.token_logprobs)
            assert c.logprobs.top_logprobs == alone[p].logprobs.top_logprobs, p

    def test_chat_greedy_matches_generate(self):
        ref = generate(self.tandem, self.folder, "What is the capital of France?", 16, chat=True)
        r = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=16, temperature=0)
        assert r.choices[0].message.role == "assistant"
        assert r.choices[0].message.content == ref["text"], (r.choices[0].message.content, ref["text"])
        assert r.usage.prompt_tokens == ref["prompt_tokens"]
        assert r.usage.completion_tokens == ref["generated_tokens"]
        assert r.object == "chat.completion"
        # max_completion_tokens is the newer name; content as text parts
        r2 = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is the capital"}, {"type": "text", "text": " of France?"}]}],
            max_completion_tokens=16, temperature=0)
        assert r2.choices[0].message.content == ref["text"]

    def test_stream_completion(self):
        full = self.client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=24,
                                              temperature=0)
        chunks = list(self.client.completions.create(
            model=MODEL, prompt="The quick brown fox", max_tokens=24, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == full.choices[0].text, (text, full.choices[0].text)
        finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finals == [full.choices[0].finish_reason], finals
        usage = [c.usage for c in chunks if c.usage]
        assert len(usage) == 1 and not chunks[-1].choices, chunks[-1]
        assert usage[0].completion_tokens == full.usage.completion_tokens
        assert usage[0].prompt_tokens == full.usage.prompt_tokens
        assert len({c.id for c in chunks}) == 1
        # without include_usage: no usage chunk
        chunks = list(self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=5,
                                                     temperature=0, stream=True))
        assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)

    def test_stream_chat(self):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}]
        full = self.client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, temperature=0)
        chunks = list(self.client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == full.choices[0].message.content
        assert chunks[-1].usage.total_tokens == full.usage.total_tokens
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        # the raw wire format: data: lines, ends with [DONE]
        body = json.dumps({"model": MODEL, "messages": msgs, "max_tokens": 3, "stream": True}).encode()
        st, hdr, data = raw(self.s.port, "POST", "/v1/chat/completions", body,
                            {"Content-Type": "application/json"})
        assert st == 200 and hdr["content-type"].startswith("text/event-stream"), (st, hdr)
        events = [e for e in data.decode().split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]", events

    def test_prompt_cache_usage(self):
        # usage.prompt_tokens_details.cached_tokens: the prompt's tokens whose keys and values came
        # from the prefix cache: none the first time (a prompt that starts unlike any other
        # test's), then every token but the last (its full blocks shared, the rest of the last
        # block's rows copied), which is computed for the logits; streamed usage says the same
        prompt = f"{time.time_ns()} cache check: the lighthouse keeper counted the ships that passed at night"
        first = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
        n = first.usage.prompt_tokens
        assert n > 17, n
        assert first.usage.prompt_tokens_details.cached_tokens == 0, first.usage
        again = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens == n - 1, (n, again.usage)
        assert again.choices[0].text == first.choices[0].text
        chunks = list(self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0,
                                                     stream=True, stream_options={"include_usage": True}))
        usage = [c.usage for c in chunks if c.usage]
        assert len(usage) == 1 and usage[0].prompt_tokens_details.cached_tokens == n - 1, usage
        msgs = [{"role": "user", "content": prompt}]
        c1 = self.client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
        c2 = self.client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0)
        m = c1.usage.prompt_tokens
        assert c2.usage.prompt_tokens_details.cached_tokens == m - 1, (m, c2.usage)

    def test_stop_strings(self):
        prompt = "Once upon a time"
        full = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0)
        text = full.choices[0].text
        assert len(set(text)) > 1, f"the tiny model's text has one character only: {text!r}"
        # a stop string made of the last char of the first run and the next one: held back in the
        # stream until known
        k = next(i for i in range(1, len(text)) if text[i] != text[i - 1])
        for stop in [text[k], text[k - 1:k + 1], [text[k - 1:k + 1], "zzzz"]]:
            s = stop if isinstance(stop, str) else stop[0]
            want = text[:text.index(s)]
            r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0,
                                               stop=stop)
            assert r.choices[0].text == want, (stop, r.choices[0].text, want)
            assert r.choices[0].finish_reason == "stop"
            assert r.usage.completion_tokens < full.usage.completion_tokens
            chunks = list(self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=24,
                                                         temperature=0, stop=stop, stream=True))
            streamed = "".join(c.choices[0].text for c in chunks)
            assert streamed == want, (stop, streamed, want)
            assert chunks[-1].choices[0].finish_reason == "stop"
            # logprobs: no token that starts at or past the cut, streamed or not
            r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0,
                                               stop=stop, logprobs=1)
            lp = r.choices[0].logprobs
            assert all(o < len(want) for o in lp.text_offset), (stop, want, lp.text_offset)
            joined = "".join(lp.tokens)
            assert joined.startswith(want), (stop, want, lp.tokens)
            chunks = list(self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=24,
                                                         temperature=0, stop=stop, stream=True, logprobs=1))
            streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                        for t in c.choices[0].logprobs.tokens]
            assert streamed == lp.tokens, (stop, streamed, lp.tokens)
        # a stop string that never occurs
        r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=24, temperature=0,
                                           stop="never seen")
        assert r.choices[0].text == text

    def test_nul_bytes(self):
        # the byte-level token of byte 0, forced by logit_bias: the text holds NUL characters
        # (JSON \u0000), streamed or not, and each token's logprobs entry has its own
        with open(os.path.join(self.folder, "tokenizer.json"), encoding="utf-8") as f:
            nul = json.load(f)["model"]["vocab"]["\u0100"]  # GPT-2's byte alphabet: byte 0
        kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=0,
                  logit_bias={str(nul): 100}, logprobs=1)
        r = self.client.completions.create(**kw).choices[0]
        assert r.text == "\0" * 5 and r.finish_reason == "length", repr(r.text)
        assert r.logprobs.tokens == ["\0"] * 5 and r.logprobs.text_offset == [0, 1, 2, 3, 4], r.logprobs
        chunks = list(self.client.completions.create(stream=True, **kw))
        assert "".join(c.choices[0].text for c in chunks) == "\0" * 5, chunks
        # (a request string may not hold U+0000: refused with the place named)
        err = self.error("/v1/completions", b'{"model":"tiny","prompt":"a","stop":"x\\u0000"}', 400)
        assert "u0000" in err["message"], err

    def test_seed(self):
        kw = dict(model=MODEL, prompt="The quick brown fox", max_tokens=24, temperature=1.5, top_p=0.99)
        a = self.client.completions.create(seed=7, **kw).choices[0].text
        b = self.client.completions.create(seed=7, **kw).choices[0].text
        assert a == b, (a, b)
        c = self.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=10, temperature=1.2, seed=3,
                                                extra_body={"top_k": 5})
        d = self.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=10, temperature=1.2, seed=3,
                                                extra_body={"top_k": 5})
        assert c.choices[0].message.content == d.choices[0].message.content

    def test_penalties(self):
        # OpenAI's presence / frequency penalties over the generated tokens (the exact rule:
        # test_generator's test_sampler_penalties): zero is the same as none, a strong frequency
        # penalty moves greedy text off its repeats, the same request gives the same text, and
        # values outside -2..2 are refused with the field named
        kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=32, temperature=0)
        plain = self.client.completions.create(**kw).choices[0].text
        zero = self.client.completions.create(presence_penalty=0, frequency_penalty=0, **kw).choices[0].text
        assert zero == plain, (zero, plain)
        a = self.client.completions.create(presence_penalty=0.5, frequency_penalty=2, **kw).choices[0].text
        b = self.client.completions.create(presence_penalty=0.5, frequency_penalty=2, **kw).choices[0].text
        assert a == b, (a, b)
        assert a != plain, (a, plain)
        # the same greedy text as `tandem generate` with the same penalties (one request, so the
        # engine's generated tokens are the generator's)
        ref = generate(self.tandem, self.folder, kw["prompt"], 32, chat=False,
                       extra=("--presence-penalty", "0.5", "--frequency-penalty", "2"))
        assert a == ref["text"], (a, ref["text"])
        neg = self.client.completions.create(presence_penalty=-1, frequency_penalty=0.25, **kw).choices[0].text
        ref = generate(self.tandem, self.folder, kw["prompt"], 32, chat=False,
                       extra=("--presence-penalty", "-1", "--frequency-penalty", "0.25"))
        assert neg == ref["text"], (neg, ref["text"])
        c = self.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=16, temperature=0.9, seed=4, frequency_penalty=-1.5)
        assert c.choices[0].message.content is not None
        self.error("/v1/completions", dict(kw, presence_penalty=2.5), 400, "presence_penalty")
        self.error("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                            "frequency_penalty": -3}, 400, "frequency_penalty")

    def test_logit_bias(self):
        # OpenAI's logit_bias: +100 on a token makes greedy text that token again and again, -100
        # on greedy's first token (from `tandem generate`) moves the first token; keys that are
        # not token ids, ids outside the vocabulary, values outside -100..100 and too many
        # entries are refused with the field named
        prompt = "Once upon a time"
        ref = generate(self.tandem, self.folder, prompt, 6, chat=False)
        first = ref["tokens"][0]
        kw = dict(model=MODEL, prompt=prompt, max_tokens=6, temperature=0, logprobs=1)
        forced = self.client.completions.create(logit_bias={"5": 100}, **kw).choices[0]
        toks = forced.logprobs.tokens
        assert len(toks) == 6 and len(set(toks)) == 1 and forced.text == toks[0] * 6, toks
        away = self.client.completions.create(logit_bias={str(first): -100}, **kw).choices[0]
        plain = self.client.completions.create(**kw).choices[0]
        assert plain.text == ref["text"], (plain.text, ref["text"])
        assert away.logprobs.tokens[0] != plain.logprobs.tokens[0], (away.logprobs.tokens, plain.logprobs.tokens)
        c = self.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4, temperature=0.8, seed=1, logit_bias={"7": 100},
                                                logprobs=True)
        assert len({t.token for t in c.choices[0].logprobs.content}) == 1, c.choices[0].logprobs.content
        base = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
        for bias in ({"abc": 1}, {"-3": 1}, {"1000000": 1}, {"5": 101}, {"5": "x"}, [5],
                     {str(i): 1 for i in range(1025)}):
            self.error("/v1/completions", dict(base, logit_bias=bias), 400, "logit_bias")

    def test_logprobs(self):
        r = self.client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8,
                                           temperature=0, logprobs=3)
        lp = r.choices[0].logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
        assert "".join(lp.tokens) == r.choices[0].text
        for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            assert v <= 0 and len(top) >= 1 and max(top.values()) <= v + 1e-4, (tok, v, top)
        assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
        r = self.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=5, temperature=0, logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        assert len(content) == 5 and all(len(c.top_logprobs) == 2 for c in content)
        assert all(c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob for c in content)
        # streamed: one logprobs entry per token
        chunks = list(self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0,
            logprobs=True, top_logprobs=1, stream=True))
        n = sum(len(c.choices[0].logprobs.content) for c in chunks if c.choices and c.choices[0].logprobs)
        assert n == 5, n

    # -- errors ------------------------------------------------------------------------------

    def error(self, path, body, status, param=None, code=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        st, _, out = raw(self.s.port, "POST", path, data, {"Content-Type": "application/json"})
        assert st == status, (body, st, out)
        err = json.loads(out)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err
        assert err["type"] == ("invalid_request_error" if status < 500 else "server_error"), err
        if param:
            assert err["param"] == param, err
        if code:
            assert err["code"] == code, err
        return err

    def test_errors(self):
        c = "/v1/completions"
        self.error(c, b"{not json", 400)
        self.error(c, b"[1,2]", 400)
        self.error(c, b"", 400)
        self.error(c, b"{" * 200 + b"}" * 200, 400)
        self.error(c, {"prompt": "x"}, 400, "model")
        self.error(c, {"model": "nope", "prompt": "x"}, 404, code="model_not_found")
        self.error(c, {"model": MODEL}, 400, "prompt")
        self.error(c, {"model": MODEL, "prompt": "x", "n": 2}, 400, "n")
        self.error(c, {"model": MODEL, "prompt": "x", "temperature": "hot"}, 400, "temperature")
        self.error(c, {"model": MODEL, "prompt": "x", "temperature": 5}, 400, "temperature")
        self.error(c, {"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens")
        self.error(c, {"model": MODEL, "prompt": "x", "stop": 5}, 400, "stop")
        self.error(c, {"model": MODEL, "prompt": "x", "stop": [""]}, 400, "stop")
        self.error(c, {"model": MODEL, "prompt": [1, 2, 100000]}, 400)
        self.error(c, {"model": MODEL, "prompt": ["a", "b"]}, 400, "prompt")
        self.error(c, {"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400)
        long_prompt = " hello" * 400  # > 256 tokens of context
        self.error(c, {"model": MODEL, "prompt": long_prompt}, 400, "prompt", "context_length_exceeded")
        self.error(c, {"model": MODEL, "prompt": "x", "max_tokens": 1000}, 400,
                   code="context_length_exceeded")
        ch = "/v1/chat/completions"
        self.error(ch, {"model": MODEL, "messages": []}, 400, "messages")
        self.error(ch, {"model": MODEL, "messages": [{"content": "x"}]}, 400, "messages")
        self.error(ch, {"model": MODEL, "messages": [{"role": "user", "content": 5}]}, 400, "messages")
        self.error(ch, {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
                   400, "top_logprobs")
        self.error(ch, {"model": MODEL, "messages": [{"role": "user", "content": long_prompt}]}, 400,
                   code="context_length_exceeded")
        st, _, out = raw(self.s.port, "GET", "/v1/nothing")
        assert st == 404 and json.loads(out)["error"]["message"], out
        st, _, out = raw(self.s.port, "GET", "/v1/completions")
        assert st == 405 and "error" in json.loads(out), out
        # every field with values of every wrong type: 4xx (or 200 where the value is allowed),
        # never 5xx, and the server stays up
        fields = ["model", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                  "seed", "stop", "n", "logprobs", "top_logprobs", "stream", "stream_options", "echo", "suffix",
                  "best_of", "presence_penalty", "frequency_penalty", "logit_bias", "repetition_penalty",
                  "ignore_eos", "messages", "user"]
        values = [None, True, -1, 0, 2**63, -2**63, 1e308, 0.5, "", "x" * 300, [], [None], [1, "a"], {}, {"a": 1},
                  [[1, 2]], [{"role": "user"}]]
        for path, base in ((c, {"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
                           (ch, {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})):
            for f in fields:
                for v in values:
                    body = dict(base, **{f: v})
                    st, _, out = raw(self.s.port, "POST", path, json.dumps(body).encode())
                    assert st in (200, 400, 404), (path, f, v, st, out[:300])
                    if st != 200:
                        assert json.loads(out)["error"]["message"], out
                    elif body.get("stream") is True:
                        assert out.endswith(b"data: [DONE]\n\n"), out[-200:]
        # the client maps them to its exceptions
        try:
            self.client.completions.create(model="nope", prompt="x")
            raise AssertionError("no error")
        except openai.NotFoundError as e:
            assert e.status_code == 404 and e.code == "model_not_found"
        try:
            self.client.completions.create(model=MODEL, prompt=long_prompt, max_tokens=5)
            raise AssertionError("no error")
        except openai.BadRequestError as e:
            assert e.code == "context_length_exceeded"
        # and the server still serves
        r = self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens == 3

    # -- load --------------------------------------------------------------------------------

    def wait_idle(self, timeout=120):
        deadline = time.time() + timeout
        while True:
            m = metrics(self.s)
            busy = metric(m, "tandem_llm_requests_running") + metric(m, "tandem_llm_requests_waiting")
            used = metric(m, "tandem_llm_kv_blocks", state="used") - metric(m, "tandem_llm_kv_blocks",
                                                                            state="cached")
            if busy == 0 and used == 0:
                return m
            if time.time() > deadline:
                raise AssertionError(f"not idle: running+waiting {busy}, blocks used {used}")
            time.sleep(0.1)

    def test_concurrent_streams_with_disconnects(self):
        rng = random.Random(5)
        n = 100
        results = [None] * n
        before = metrics(self.s)

        def one(i, max_tokens, drop_after):
            try:
                cl = openai.OpenAI(base_url=f"http://127.0.0.1:{self.s.port}/v1", api_key="none",
                                   max_retries=0, timeout=300)
                got = 0
                with cl.completions.create(model=MODEL, prompt=f"Once upon a time {i}", max_tokens=max_tokens,
                                           temperature=0.8, seed=i, stream=True,
                                           stream_options={"include_usage": True}) as stream:
                    usage = None
                    finish = None
                    for chunk in stream:
                        if chunk.usage:
                            usage = chunk.usage
                        if chunk.choices and chunk.choices[0].finish_reason:
                            finish = chunk.choices[0].finish_reason
                        got += 1
                        if drop_after is not None and got >= drop_after:
                            results[i] = ("dropped", got)
                            return
                results[i] = ("done", finish, usage.completion_tokens if usage else None, max_tokens)
            except Exception as e:  # noqa: BLE001
                results[i] = ("error", repr(e))

        threads = []
        for i in range(n):
            mt = rng.randint(1, 48)
            drop = rng.randint(1, 6) if rng.random() < 0.3 else None
            threads.append(threading.Thread(target=one, args=(i, mt, drop)))
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        errors = [r for r in results if r is None or r[0] == "error"]
        assert not errors, errors[:5]
        for r in results:
            if r[0] == "done":
                assert r[1] in ("stop", "length"), r
                assert r[2] is not None and 1 <= r[2] <= r[3], r
                if r[1] == "length":
                    assert r[2] == r[3], r
        m = self.wait_idle()
        free = metric(m, "tandem_llm_kv_blocks", state="free") + metric(m, "tandem_llm_kv_blocks", state="cached")
        assert free == metric(m, "tandem_llm_kv_blocks", state="total"), "KV blocks leaked"
        done = sum(metric(m, "tandem_llm_requests_total", finish=f) - metric(before, "tandem_llm_requests_total", finish=f)
                   for f in ("stop", "length", "cancelled", "error"))
        assert done == n, (done, n)
        assert metric(m, "tandem_llm_requests_total", finish="error") == metric(before, "tandem_llm_requests_total", finish="error")
        # the server still serves
        r = self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens == 2

    def test_client_gone_while_waiting(self):
        """Clients that close their connection while their (not streamed) request waits or runs:
        the sweeper notices and the engine cancels them. The sweeper looks every SV_SWEEP_MS
        (100 ms); on a fast machine a burst can end before it looks (a cancel after the end
        counts as gone, not cancelled), so up to four bursts, each twice as long as the last."""
        import socket
        body = json.dumps({"model": MODEL, "prompt": "Hello", "max_tokens": 240, "ignore_eos": True}).encode()
        tries = []
        for attempt in range(4):
            before = metrics(self.s)
            socks = []
            for _ in range(24 << attempt):  # three times the batch and more: most of them wait
                k = socket.create_connection(("127.0.0.1", self.s.port))
                k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                socks.append(k)
            time.sleep(0.05)
            for k in socks:
                k.close()
            m = self.wait_idle()
            gone = metric(m, "tandem_llm_client_gone_total") - metric(before, "tandem_llm_client_gone_total")
            cancelled = (metric(m, "tandem_llm_requests_total", finish="cancelled")
                         - metric(before, "tandem_llm_requests_total", finish="cancelled"))
            tries.append((24 << attempt, gone, cancelled))
            if gone >= 1 and cancelled >= 1:
                break
        assert gone >= 1 and cancelled >= 1, tries  # (connections, gone, cancelled) per burst
        r = self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens == 2

    def test_smol(self):
        if not self.smol:
            return
        prompts = ["What is the capital of France?", "Write a haiku about the sea.", "List three colors.",
                   "What is 2 + 2?"]
        refs = {p: generate(self.tandem, self.smol, p, 24, chat=True)["text"] for p in prompts}
        got = {}

        def run(p):
            got[p] = self.client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": p}], max_tokens=24,
                temperature=0).choices[0].message.content

        run(prompts[0])
        assert got[prompts[0]] == refs[prompts[0]], (got, refs)
        threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == refs, (got, refs)
        ref = generate(self.tandem, self.smol, "The capital of France is", 12, chat=False)["text"]
        r = self.client.completions.create(model="smol", prompt="The capital of France is", max_tokens=12,
                                           temperature=0)
        assert r.choices[0].text == ref, (r.choices[0].text, ref)

    def test_metrics(self):
        m = self.wait_idle()
        for name in ("tandem_llm_prompt_tokens_total", "tandem_llm_generation_tokens_total",
                     "tandem_llm_preemptions_total", "tandem_llm_requests_running", "tandem_llm_requests_waiting"):
            assert metric(m, name) >= 0, name
        assert metric(m, "tandem_llm_generation_tokens_total") > 0
        assert metric(m, "tandem_llm_prompt_tokens_total") > 0
        for h in ("tandem_llm_time_to_first_token_seconds", "tandem_llm_inter_token_latency_seconds"):
            n = metric(m, h + "_count")
            assert n > 0 and metric(m, h + "_bucket", le="+Inf") == n, h
            assert metric(m, h + "_sum") > 0
        before = metric(m, "tandem_llm_generation_tokens_total")
        self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0,
                                    extra_body={"ignore_eos": True})
        m = metrics(self.s)
        assert metric(m, "tandem_llm_generation_tokens_total") >= before + 4

    def test_kserve_side(self):
        st, _, out = raw(self.s.port, "POST", "/v2/repository/index", b"{}")
        assert st == 200 and {"name": MODEL, "version": "1", "state": "READY", "reason": ""} in json.loads(out), out
        st, _, out = raw(self.s.port, "POST", f"/v2/models/{MODEL}/infer", b'{"inputs": []}')
        assert st == 400 and "OpenAI" in json.loads(out)["error"], out
        st, _, _ = raw(self.s.port, "GET", f"/v2/models/{MODEL}/ready")
        assert st == 200
        st, _, out = raw(self.s.port, "GET", f"/v2/models/{MODEL}")
        assert st == 200 and json.loads(out)["platform"] == "tandem_llm", out
        st, _, out = raw(self.s.port, "GET", f"/v2/models/{MODEL}/config")
        assert st == 200 and json.loads(out)["backend"] == "tandem_llm", out
        for path in (f"/v2/models/{MODEL}/stats", "/v2/models/stats", "/v2"):
            st, _, out = raw(self.s.port, "GET", path)
            assert st == 200, (path, out)

    def test_unload_cancels_and_reload(self):
        result = {}

        def stream():
            try:
                body = json.dumps({"model": MODEL, "prompt": "Hello", "max_tokens": 200, "stream": True,
                                   "ignore_eos": True}).encode()
                st, _, data = raw(self.s.port, "POST", "/v1/completions", body)
                result["data"] = data.decode()
            except Exception as e:  # noqa: BLE001
                result["error"] = repr(e)

        t = threading.Thread(target=stream)
        t.start()
        time.sleep(0.3)
        st, _, out = raw(self.s.port, "POST", f"/v2/repository/models/{MODEL}/unload", b"")
        assert st == 200, out
        t.join(60)
        assert "data" in result, result
        assert result["data"].endswith("data: [DONE]\n\n"), result["data"][-300:]
        try:
            self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=2)
            raise AssertionError("no error")
        except openai.APIStatusError as e:
            assert e.status_code in (404, 503), e
        st, _, out = raw(self.s.port, "POST", f"/v2/repository/models/{MODEL}/load", b"")
        assert st == 200, out
        r = self.client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens == 2
        self.wait_idle()

    def test_kv_cache_dtype(self):
        repo = os.path.dirname(os.path.dirname(self.folder))

        def add(name, dtype):
            d = os.path.join(repo, name, "1")
            os.makedirs(d)
            for f in os.listdir(self.folder):
                os.symlink(os.path.join(self.folder, f), os.path.join(d, f))
            with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
                f.write('backend: "tandem_llm"\n'
                        'parameters { key: "threads" value { string_value: "1" } }\n'
                        'parameters { key: "kv_memory_mb" value { string_value: "1" } }\n'
                        f'parameters {{ key: "kv_cache_dtype" value {{ string_value: "{dtype}" }} }}\n')

        add("tiny_f16", "f16")
        add("tiny_fp8", "fp8")
        st, _, out = raw(self.s.port, "POST", "/v2/repository/models/tiny_fp8/load", b"")
        assert st == 400 and "kv_type 'fp8'" in out.decode(), (st, out)
        st, _, out = raw(self.s.port, "POST", "/v2/repository/models/tiny_f16/load", b"")
        assert st == 200, out
        try:
            same = 0
            for prompt in ["Once upon a time", "The quick brown fox", "Hello there"]:
                a, b = (self.client.completions.create(model=m, prompt=prompt, max_tokens=20, temperature=0,
                                                       logprobs=2).choices[0] for m in (MODEL, "tiny_f16"))
                la, lb = a.logprobs, b.logprobs
                # the same tokens up to a near tie of the float32 pool's top two (the tiny
                # random model has some), the log-probabilities within 5e-2 until there
                n = 0
                while n < len(la.tokens) and n < len(lb.tokens) and la.tokens[n] == lb.tokens[n]:
                    assert abs(la.token_logprobs[n] - lb.token_logprobs[n]) <= 5e-2, (prompt, n, la, lb)
                    n += 1
                if n < len(la.tokens):
                    top = sorted(la.top_logprobs[n].values(), reverse=True)
                    assert len(top) == 2 and top[0] - top[1] <= 1e-1, (prompt, n, la.top_logprobs[n], b.text)
                same += n == len(la.tokens) and a.text == b.text
            assert same >= 2, same
            m = metrics(self.s)

            def kv(model, what, dtype, state):
                return m[f'tandem_llm_{what}{{model="{model}",version="1",'
                         + (f'dtype="{dtype}",' if dtype else "") + f'state="{state}"}}']
            # 2 layers x key and value x 16 tokens x 2 heads x 16 values: 4096 bytes a block
            # in float16 (8192 in float32), 1 MiB: 256 blocks
            assert kv("tiny_f16", "kv_blocks", None, "total") == 256
            assert kv("tiny_f16", "kv_cache_bytes", "float16", "total") == 1 << 20
            assert kv("tiny_f16", "kv_cache_bytes", "float16", "used") == 4096 * kv("tiny_f16", "kv_blocks", None, "used")
            assert kv(MODEL, "kv_cache_bytes", "float32", "total") == 8192 * kv(MODEL, "kv_blocks", None, "total")
        finally:
            raw(self.s.port, "POST", "/v2/repository/models/tiny_f16/unload", b"")
        # tandem's 4-bit pool: greedy text of `tandem generate --kv-type int4` (the generator's
        # 4-bit cache of the same rows); 18 bytes a row at the tiny model's head size 16, so
        # 2304 a block and 455 blocks in 1 MiB
        add("tiny_q4", "int4")
        st, _, out = raw(self.s.port, "POST", "/v2/repository/models/tiny_q4/load", b"")
        assert st == 200, out
        try:
            for prompt in ["Once upon a time", "The quick brown fox", "Hello there"]:
                ref = generate(self.tandem, self.folder, prompt, 20, chat=False, kv_type="int4")
                r = self.client.completions.create(model="tiny_q4", prompt=prompt, max_tokens=20, temperature=0)
                assert r.choices[0].text == ref["text"], (prompt, r.choices[0].text, ref["text"])
                assert r.usage.completion_tokens == ref["generated_tokens"], (r.usage, ref)
            self.wait_idle()
            m = metrics(self.s)
            total = m['tandem_llm_kv_blocks{model="tiny_q4",version="1",state="total"}']
            assert total == (1 << 20) // 2304, total
            assert m['tandem_llm_kv_cache_bytes{model="tiny_q4",version="1",dtype="uint8",state="total"}'] == 2304 * total
            blocks = {st: m[f'tandem_llm_kv_blocks{{model="tiny_q4",version="1",state="{st}"}}']
                      for st in ("used", "cached")}
            assert blocks["used"] == blocks["cached"], blocks  # nothing held but the prefix cache
        finally:
            raw(self.s.port, "POST", "/v2/repository/models/tiny_q4/unload", b"")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--filter", default="")
    ap.add_argument("--smol", help="also check this SmolLM2 folder (slow)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tandem-openai-test-")
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    folder = make_repository(repo)
    smol = add_smol(repo, args.smol) if args.smol else None
    passed = failed = 0
    server = None
    try:
        server = Server(args.tandem, repo)
        t = Tests(server, args.tandem, folder, smol)
        order = ["test_models", "test_completion_greedy_matches_generate", "test_chat_greedy_matches_generate",
                 "test_stream_completion", "test_stream_chat", "test_prompt_cache_usage", "test_stop_strings",
                 "test_nul_bytes",
                 "test_seed", "test_penalties",
                 "test_logit_bias", "test_logprobs",
                 "test_errors", "test_concurrent_streams_with_disconnects",
                 "test_client_gone_while_waiting", "test_smol", "test_metrics", "test_kserve_side",
                 "test_unload_cancels_and_reload", "test_kv_cache_dtype"]
        names = [n for n in order if args.filter in n and (smol or n != "test_smol")]
        for name in names:
            t0 = time.time()
            try:
                getattr(t, name)()
                passed += 1
                print(f"PASS {name} ({time.time() - t0:.2f} s)", flush=True)
            except Exception:  # noqa: BLE001
                failed += 1
                print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        rc = server.stop()
        if rc != 0:
            failed += 1
            print(f"FAIL clean shutdown: exit code {rc}\n" + "".join(server.lines[-40:]), flush=True)
        else:
            passed += 1
            print("PASS clean shutdown (exit code 0)", flush=True)
    finally:
        if server and server.proc.poll() is None:
            server.proc.kill()
        if failed and server:
            print("--- server log (last 40 lines) ---\n" + "".join(server.lines[-40:]), flush=True)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
