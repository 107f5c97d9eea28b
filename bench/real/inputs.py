"""Meaningful inputs for the real models, made here from fixed seeds (no file is downloaded):
rendered text for OCR, a drawn scene for the detector, speech-like audio for VAD, real text
for the text models, real file bytes for magika."""
import io
import json
import math
import os
import unicodedata

import numpy as np

# What the OCR inputs say; the recognizer's text is compared with ORT's (and with these).
OCR_LINES = ["Tandem runs ONNX models", "on CPUs and GPUs together", "Invoice 2026-12-01: 417.50 EUR"]
REC_LINE = "Tandem 2026: ONNX on CPU"


def _font(size):
    from PIL import ImageFont
    # Pillow's bundled scalable font: the same glyphs on every machine, no system font needed
    return ImageFont.load_default(size=size)


def text_page(width=640, height=480, lines=OCR_LINES, seed=3):
    """An RGB uint8 page: a light, slightly noisy background and dark text lines."""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    bg = 235 + rng.integers(-6, 7, (height, width, 1))
    bg = np.clip(np.repeat(bg, 3, axis=2) + np.array([4, 0, -6]), 0, 255).astype(np.uint8)
    img = Image.fromarray(bg)
    d = ImageDraw.Draw(img)
    y = 40
    for i, line in enumerate(lines):
        size = (34, 28, 24)[i % 3]
        d.text((30 + 15 * i, y), line, fill=(20, 20, 40 + 40 * i), font=_font(size))
        y += int(size * 2.6)
    d.rectangle([30, y + 10, width - 30, y + 12], fill=(90, 90, 90))  # a rule, not text
    return np.asarray(img)


def text_line(text=REC_LINE, size=40):
    """An RGB uint8 image of one text line, cropped to the text with a small margin."""
    from PIL import Image, ImageDraw
    font = _font(size)
    x0, y0, x1, y1 = font.getbbox(text)
    pad = size // 5
    img = Image.new("RGB", (x1 - x0 + 2 * pad, y1 - y0 + 2 * pad), (245, 245, 240))
    ImageDraw.Draw(img).text((pad - x0, pad - y0), text, fill=(15, 15, 15), font=font)
    return np.asarray(img)


def ppocr_norm(img):
    """HWC uint8 -> CHW float32 in [-1, 1] ((x / 255 - 0.5) / 0.5, as PP-OCR's pre-processing)."""
    return ((img.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def ppocr_det_input(img):
    return ppocr_norm(img)[None]


def ppocr_line_input(img, height=48, width=320):
    """Resized to `height` keeping the aspect ratio (at most `width` wide), normalised, and
    padded on the right with zeros, as PP-OCR's recognizer and classifier pre-processing."""
    from PIL import Image
    h, w = img.shape[:2]
    rw = min(width, int(math.ceil(height * w / h)))
    resized = np.asarray(Image.fromarray(img).resize((rw, height), Image.BILINEAR))
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :rw] = ppocr_norm(resized)
    return out


def _portrait(size, seed):
    """A soft-shaded head-and-shoulders portrait (hair, face, eyes, brows, nose, lips), RGB
    uint8 size x size."""
    from PIL import Image, ImageFilter
    rng = np.random.default_rng(seed)
    S = float(size)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    img = np.zeros((size, size, 3))
    img[:] = np.array([120, 140, 160]) + (yy / S * 40)[..., None]

    def blob(cx, cy, rx, ry, color, strength=1.0, soft=0.15):
        d = ((xx - cx * S) / (rx * S)) ** 2 + ((yy - cy * S) / (ry * S)) ** 2
        a = np.clip((1 - d) / soft, 0, 1)[..., None] * strength
        img[:] = img * (1 - a) + np.array(color) * a
    blob(0.5, 1.05, 0.48, 0.35, (70, 80, 110))       # shoulders
    blob(0.5, 0.72, 0.07, 0.12, (200, 150, 120))     # neck
    blob(0.5, 0.30, 0.25, 0.27, (60, 40, 30))        # hair
    blob(0.5, 0.42, 0.19, 0.25, (215, 165, 135))     # face
    d = ((xx - 0.5 * S) / (0.19 * S)) ** 2 + ((yy - 0.42 * S) / (0.25 * S)) ** 2
    img[:] = img * (1 - 0.35 * (np.clip(d, 0, 1) ** 2 * (d < 1))[..., None])  # shading
    for ex in (0.42, 0.58):
        blob(ex, 0.38, 0.045, 0.02, (245, 240, 235), soft=0.5)   # eyes
        blob(ex, 0.38, 0.018, 0.018, (60, 40, 30), soft=0.5)
        blob(ex, 0.345, 0.05, 0.008, (70, 50, 40), soft=0.6)     # brows
    blob(0.5, 0.46, 0.02, 0.04, (190, 135, 110), 0.6, soft=0.8)  # nose
    blob(0.5, 0.535, 0.055, 0.015, (170, 80, 80), soft=0.6)      # lips
    img += rng.normal(0, 3, img.shape)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    return im.filter(ImageFilter.GaussianBlur(1.2))


def scene(size=320, seed=5):
    """Two people (soft-shaded portraits of two sizes) against a wall and a floor, as the
    float32 1x3xSxS RGB input in [0, 1] of a YOLOv8 export. (Flat cartoons draw no detection
    from nudenet's detector; these draw faces.)"""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    wall = np.linspace(140, 185, size)[:, None, None] * np.array([1.0, 1.08, 1.15])
    arr = np.broadcast_to(wall, (size, size, 3)).copy()
    arr[int(size * 0.8):] = np.array([110, 95, 80])
    arr = np.clip(arr + rng.normal(0, 3, arr.shape), 0, 255).astype(np.uint8)
    img = Image.fromarray(arr)
    ImageDraw.Draw(img).rectangle([int(size * 0.78), int(size * 0.1), int(size * 0.95),
                                   int(size * 0.35)], fill=(200, 190, 150))  # a picture frame
    for frac, x, y, seed_i in ((0.35, 0.06, 0.12, 7), (0.5, 0.42, 0.30, 9)):
        p = _portrait(size, seed_i).resize((int(size * frac), int(size * frac)), Image.BILINEAR)
        img.paste(p, (int(size * x), int(size * y)))
    return (np.asarray(img).astype(np.float32) / 255.0).transpose(2, 0, 1)[None].copy()


def speech_like(sr=16000, seconds=3.0, seed=11):
    """float32 audio in [-1, 1]: silence (low noise), then voiced syllables (a glottal pulse
    train at a gliding pitch through vowel formant resonators, 4-5 syllables a second), a
    pause, more syllables, silence. Deterministic."""
    rng = np.random.default_rng(seed)
    n = int(sr * seconds)
    out = rng.normal(0, 0.002, n)
    vowels = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480),
              (570, 840, 2410)]
    spans = [(0.40, 1.30), (1.75, 2.55)]
    for s0, s1 in spans:
        t = s0
        k = 0
        while t < s1:
            dur = 0.16 + 0.06 * ((k * 7) % 3) / 2
            i0, i1 = int(t * sr), min(n, int((t + dur) * sr))
            m = i1 - i0
            f0 = 110 + 30 * np.sin(np.linspace(0, np.pi, m)) + 10 * k % 20
            phase = np.cumsum(f0 / sr)
            src = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)  # pulses
            src += rng.normal(0, 0.02, m)
            sig = np.zeros(m)
            for fi, f in enumerate(vowels[k % len(vowels)]):
                sig += _resonate(src, f, 80 + 40 * fi, sr) / (fi + 1)
            env = np.sin(np.linspace(0, np.pi, m)) ** 0.6
            out[i0:i1] += sig * env
            t += dur + 0.03
            k += 1
    out /= np.max(np.abs(out)) * 1.25
    return out.astype(np.float32)


def _resonate(x, freq, bw, sr):
    """A two-pole resonator (one formant)."""
    r = math.exp(-math.pi * bw / sr)
    a1, a2 = -2 * r * math.cos(2 * math.pi * freq / sr), r * r
    y = np.zeros_like(x)
    y1 = y2 = 0.0
    for i in range(len(x)):
        v = x[i] - a1 * y1 - a2 * y2
        y[i] = v
        y2, y1 = y1, v
    return y * (1 - r)


def vad_chunks(audio, chunk=512, context=64):
    """[n, 1, context + chunk] float32: each 512-sample chunk with the 64 samples before it,
    as silero's own wrapper feeds the model at 16 kHz."""
    n = len(audio) // chunk
    padded = np.concatenate([np.zeros(context, np.float32), audio[:n * chunk]])
    return np.stack([padded[i * chunk:i * chunk + context + chunk][None] for i in range(n)])


# ---- text -----------------------------------------------------------------------------------

SENTENCES = [
    "The cat sits on the warm windowsill in the afternoon sun.",
    "A kitten is resting by the window, enjoying the sunshine.",
    "Interest rates were raised again by the central bank this quarter.",
    "The bank increased its lending rates for the second time this year.",
]

THAI_TEXT = "การตัดคำภาษาไทยด้วยโครงข่ายประสาทเทียมทำงานได้รวดเร็วและแม่นยำ วันนี้อากาศดีมาก"


class WordPiece:
    """BERT's uncased tokenizer: lower case, accents stripped, split on spaces and
    punctuation, then greedy longest-match word pieces from vocab.txt."""

    def __init__(self, vocab_path):
        with open(vocab_path, encoding="utf-8") as f:
            self.vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}

    @staticmethod
    def _is_punct(ch):
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    def _words(self, text):
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
        words, cur = [], ""
        for ch in text:
            if ch.isspace():
                if cur:
                    words.append(cur)
                cur = ""
            elif self._is_punct(ch):
                if cur:
                    words.append(cur)
                words.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            words.append(cur)
        return words

    def tokenize(self, text):
        ids = [self.vocab["[CLS]"]]
        for w in self._words(text):
            start, pieces = 0, []
            while start < len(w):
                end = len(w)
                while end > start:
                    piece = w[start:end] if start == 0 else "##" + w[start:end]
                    if piece in self.vocab:
                        pieces.append(self.vocab[piece])
                        break
                    end -= 1
                if end == start:
                    pieces = [self.vocab["[UNK]"]]
                    break
                start = end
            ids += pieces
        return ids + [self.vocab["[SEP]"]]

    def batch(self, texts):
        """input_ids and attention_mask, int64 [batch, longest], padded with [PAD] (0)."""
        seqs = [self.tokenize(t) for t in texts]
        n = max(len(s) for s in seqs)
        ids = np.zeros((len(seqs), n), np.int64)
        mask = np.zeros((len(seqs), n), np.int64)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = s
            mask[i, :len(s)] = 1
        return ids, mask


def attacut_chars(chars_json, text=THAI_TEXT):
    """attacut-c's input: int64 [1, len] character ids (punctuation and unknown characters as
    the model's tokens)."""
    import string
    with open(chars_json, encoding="utf-8") as f:
        ch2ix = json.load(f)
    ids = []
    for c in text:
        if c in string.punctuation:
            ids.append(ch2ix.get("<PUNC>", ch2ix["<UNK>"]))
        else:
            ids.append(ch2ix.get(c, ch2ix["<UNK>"]))
    return np.array(ids, np.int64)[None]


# ---- files for magika -----------------------------------------------------------------------

def magika_files(repo, tandem_binary):
    """(name, bytes, expected label) of real files: sources of this repository, the tandem
    binary, and a PNG and a JSON document made here."""
    from PIL import Image
    files = []
    for rel, label in [("src/api/session.c", "c"), ("bench/run_cpu_bench.py", "python"),
                       ("README.md", "markdown"), ("CMakeLists.txt", "cmake"),
                       ("scripts/test.sh", "shell")]:
        p = os.path.join(repo, rel)
        if os.path.exists(p):
            with open(p, "rb") as f:
                files.append((rel, f.read(), label))
    if tandem_binary and os.path.exists(tandem_binary):
        with open(tandem_binary, "rb") as f:
            files.append(("build/tandem", f.read(), "elf"))
    buf = io.BytesIO()
    Image.fromarray((scene(96)[0].transpose(1, 2, 0) * 255).astype(np.uint8)).save(buf, "PNG")
    files.append(("scene.png", buf.getvalue(), "png"))
    doc = {"models": [{"name": n, "threads": [1, 2], "p50_ms": [1.5 * i, 0.9 * i]}
                      for i, n in enumerate(["det", "rec", "cls", "vad"])], "ok": True}
    files.append(("results.json", json.dumps(doc, indent=2).encode(), "json"))
    return files


def magika_features(data, beg_size=1024, end_size=1024, block_size=4096, pad=256):
    """magika's features: the first and last bytes of a file (at most block_size read at each
    end, whitespace stripped), padded with the padding token: int32 [beg_size + end_size]."""
    if len(data) <= block_size:
        beg = data.strip()
        end = beg
    else:
        beg = data[:block_size].lstrip()
        end = data[-block_size:].rstrip()
    b = list(beg[:beg_size]) + [pad] * max(0, beg_size - len(beg))
    e = list(end[-end_size:]) if end_size and len(end) else []
    e = [pad] * (end_size - len(e)) + e
    return np.array(b + e, np.int32)
