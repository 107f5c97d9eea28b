#!/usr/bin/env python3
"""Deterministic text corpus for tokenizer tests (tools/make_test_tokenizers.py).

Each case is one string (it may hold newlines): prose with contractions, numbers, code,
whitespace runs, many scripts (Latin with combining marks, Greek, Cyrillic, Arabic and Hebrew
(RTL), Devanagari, Thai, CJK, Hangul), emoji with ZWJ sequences, skin tones and flags,
unusual whitespace and digits, and special-token strings. Only characters assigned in
Unicode 14 (Python 3.11's unicodedata) are used.

    python tools/make_tokenizer_corpus.py [N] > corpus.txt   (cases separated by \\x1e)
"""
import random
import sys

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have "
         "an they which one you were her all she there would their we him been has when who will "
         "more no if out so said what up its about into than them can only other new some could "
         "time these two may then do first any my now such like our over man me even most made "
         "after also did many before must through back years where much your way well down "
         "should because each just those people Mr how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three tokenizer Transformer naïve café résumé coöperate Zürich straße").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL",
                "'D", "'M", "’s", "'x", "''", "'"]
SCRIPTS = [
    "Καλημέρα κόσμε, τι κάνεις σήμερα;",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "مرحبا بالعالم، كيف حالك اليوم؟ ١٢٣٤٥٦٧٨٩٠",
    "שלום עולם, מה שלומך היום? עברית",
    "नमस्ते दुनिया, आप कैसे हैं? हिन्दी में लिखा गया पाठ ०१२३",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "こんにちは世界。カタカナとひらがなと漢字を混ぜて書きます。",
    "안녕하세요 세계, 한국어 문장입니다.",
    "Ελληνικά και ქართული ენა და Հայերեն լեզու",
    "Tiếng Việt có rất nhiều dấu: ả ạ ấ ầ ẩ ẫ ậ",
    "e\u0301 a\u0300 o\u0308 n\u0303 combining: Z\u0351\u0352\u0353a\u0354l\u0355g\u0356o",
    "ﬁ ﬂ ℌ ℍ ℎ Ω Å K ſt ſ İ ı ß ẞ",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab a\u0301\u0316 q\u0307\u0323 \u00c5\u0301 \u0958 \u2126",
    "አማርኛ ቋንቋ ሰላም",
    "தமிழ் மொழி வணக்கம் ০১২৩ বাংলা",
]
EMOJI = ["😀", "👍", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇫🇷", "🇯🇵", "❤️", "🤖",
         "🧑\u200d💻", "👩🏾\u200d🔬", "✨", "🔥🔥🔥", "☕", "1️⃣", "#️⃣"]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "3.14159", "1,000,000", "-17", "2026-12-01",
           "0xFF", "1e-5", "٣٤٥", "１２３", "²³", "½", "Ⅻ", "10:30", "$99.99", "50%"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\t", "\u00a0", "\u3000",
          "\u2028", "\u2009", "\x0b", "\x0c", "\x85", "    "]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<pad>",
            "<|begin_of_text|>", "<|eot_id|>", "<|im_st", "<s", "<|", "|>"]
CODE = [
    "def f(x):\n    return x * 2  # double\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if __name__ == '__main__':\n    main()\n",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const x = {a: 1, 'b': [2, 3], \"c\": null};",
    "    \n  \t  x=1\n\n\n    y = x++ + --x;",
    "<div class=\"box\">&nbsp;&lt;tag&gt;</div>",
    "$ ls -la | grep '.py$' && echo \"done\" >> log.txt",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
]


def sentence(rng):
    n = rng.randint(3, 14)
    out = []
    for i in range(n):
        w = rng.choice(WORDS)
        if rng.random() < 0.1:
            w = w.capitalize() if rng.random() < 0.7 else w.upper()
        if rng.random() < 0.08:
            w += rng.choice(CONTRACTIONS)
        if rng.random() < 0.06:
            w = rng.choice(NUMBERS)
        out.append(w)
        if rng.random() < 0.05:
            out.append(rng.choice(",.;:!?-()\"'"))
    return " ".join(out) + rng.choice([".", "!", "?", "", "...", " "])


def piece(rng):
    r = rng.random()
    if r < 0.35:
        return sentence(rng)
    if r < 0.55:
        s = rng.choice(SCRIPTS)
        if rng.random() < 0.5:  # a slice, possibly cutting words (never inside a character)
            a = rng.randrange(len(s))
            s = s[a:a + rng.randint(1, 30)]
        return s
    if r < 0.65:
        return rng.choice(CODE)
    if r < 0.73:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4)))
    if r < 0.81:
        return rng.choice(NUMBERS) + rng.choice(["", " ", "+", "x"]) + rng.choice(NUMBERS)
    if r < 0.9:
        return rng.choice(SPECIALS)
    return "".join(chr(rng.randint(0x20, 0x7e)) for _ in range(rng.randint(1, 12)))


def case(rng):
    n = rng.randint(1, 5)
    parts = []
    for i in range(n):
        parts.append(piece(rng))
        if i + 1 < n:
            parts.append(rng.choice(SPACES) if rng.random() < 0.6 else " ")
    s = "".join(parts)
    if rng.random() < 0.1:
        s = rng.choice(SPACES) + s
    if rng.random() < 0.1:
        s += rng.choice(SPACES)
    return s


def corpus(n=6000, seed=19):
    rng = random.Random(seed)
    cases = [case(rng) for _ in range(n)]
    # fixed edge cases
    cases += ["", " ", "  ", "\n", "a", "'s", " 's", "'S'S", "a\u0301", "\r\n\r\n  x",
              "   leading", "trailing   ", "x" * 3000, "ab " * 500, "1" * 40,
              "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n", "<s><s></s>",
              "\u00a0\u00a0x", "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\t\tif x:\n\t\t\treturn"]
    return cases


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    sys.stdout.write("\x1e".join(corpus(n)))
