/* Unicode helpers and the pre-tokenizer patterns, matched by hand (no regex engine).
 *
 * The patterns (recognised by their exact text in tokenizer.c) are alternations tried in
 * order at each position, as a backtracking regex engine does; each is written out below
 * as that sequence of tries. L = \p{L}, N = \p{N}, S = \s (Unicode White_Space). */
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer_impl.h"

/* ---- UTF-8 ---- */
size_t tdm_tok_utf8_dec(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80 || n < 2) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (c < 0xF0 || n < 4) {
        *cp = n < 3 ? c : ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        return n < 3 ? 1 : 3;
    }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

size_t tdm_tok_utf8_enc(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid sequence at s (1..4), 0 when invalid; *need > 0 when s[0..n) is a
 * valid but incomplete start (more bytes could complete it). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *valid_prefix) {
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    *valid_prefix = 0;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    size_t i = 1;
    for (; i < len && i < n; i++) {
        unsigned b = s[i];
        unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
    }
    *valid_prefix = i;
    return i == len ? len : 0;
}

size_t tdm_tok_utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0, vp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq(s + i, n - i, &vp);
        if (!k) return i;
        i += k;
    }
    return n;
}

/* Appends bytes as UTF-8, each maximal invalid subpart replaced by U+FFFD (Rust's
 * from_utf8_lossy, which HF's decoders use). *incomplete: the input ends inside a valid but
 * unfinished sequence. */
bool tdm_tok_lossy(tdm_tok_buf *out, const unsigned char *s, size_t n, bool *incomplete) {
    size_t i = 0, vp;
    if (incomplete) *incomplete = false;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] < 0x80) j++;
        if (j > i && !tdm_tok_buf_put(out, s + i, j - i)) return false;
        i = j;
        if (i >= n) break;
        size_t k = utf8_seq(s + i, n - i, &vp);
        if (k) {
            if (!tdm_tok_buf_put(out, s + i, k)) return false;
            i += k;
            continue;
        }
        if (!tdm_tok_buf_put(out, "\xEF\xBF\xBD", 3)) return false;
        if (vp && i + vp == n && incomplete) *incomplete = true;
        i += vp ? vp : 1;
    }
    return true;
}

/* ---- buffers ---- */
bool tdm_tok_buf_put(tdm_tok_buf *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

bool tdm_tok_pieces_add(tdm_tok_pieces *l, const char *a, size_t na, const char *b, size_t nb) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        tdm_tok_span *sp = realloc(l->sp, cap * sizeof *sp);
        if (!sp) return false;
        l->sp = sp;
        l->cap = cap;
    }
    size_t off = l->text.len;
    if (!tdm_tok_buf_put(&l->text, a, na) || !tdm_tok_buf_put(&l->text, b, nb)) return false;
    l->sp[l->n].off = off;
    l->sp[l->n].len = na + nb;
    l->n++;
    return true;
}

bool tdm_tok_pieces_end(tdm_tok_pieces *l, size_t off) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        tdm_tok_span *sp = realloc(l->sp, cap * sizeof *sp);
        if (!sp) return false;
        l->sp = sp;
        l->cap = cap;
    }
    l->sp[l->n].off = off;
    l->sp[l->n].len = l->text.len - off;
    l->n++;
    return true;
}

void tdm_tok_pieces_clear(tdm_tok_pieces *l) {
    l->n = 0;
    l->text.len = 0;
}

void tdm_tok_pieces_free(tdm_tok_pieces *l) {
    free(l->text.p);
    free(l->sp);
    memset(l, 0, sizeof *l);
}

/* ---- Unicode classes ---- */
bool tdm_tok_is_space(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int tdm_tok_ucls(uint32_t c) {
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return TDM_TOK_L;
        return c >= '0' && c <= '9' ? TDM_TOK_N : TDM_TOK_OTHER;
    }
    size_t lo = 0, hi = tdm_tok_unicode_n_ranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < tdm_tok_unicode_ranges[mid].lo) hi = mid;
        else if (c > tdm_tok_unicode_ranges[mid].hi) lo = mid + 1;
        else return (int)tdm_tok_unicode_ranges[mid].cls;
    }
    return TDM_TOK_OTHER;
}

/* ---- byte-level map (GPT-2's bytes_to_unicode) ---- */
/* Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) are their own character; the other
 * 68 bytes take 0x100, 0x101, ... in byte order. */
static bool byte_printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tdm_tok_byte_char(unsigned char b) {
    if (byte_printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;         /* 0x00..0x20: 33 bytes */
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu); /* 0x7F..0xA0: 34 bytes */
    return 0x100u + 67;                        /* 0xAD */
}

int tdm_tok_char_byte(uint32_t cp) {
    if (cp < 0x100) return byte_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t k = cp - 0x100;
    return k < 33 ? (int)k : k < 67 ? (int)(0x7F + k - 33) : 0xAD;
}

/* ---- the patterns ---- */
typedef struct cur {
    const unsigned char *s;
    size_t n;
} cur;

/* Character at byte offset i: class bits and length. */
enum { C_L = 1, C_N = 2, C_S = 4, C_RN = 8 };
static unsigned cls_at(cur c, size_t i, size_t *len, uint32_t *cpo) {
    uint32_t cp;
    *len = tdm_tok_utf8_dec(c.s + i, c.n - i, &cp);
    if (cpo) *cpo = cp;
    unsigned k = (unsigned)tdm_tok_ucls(cp);
    if (tdm_tok_is_space(cp)) k |= C_S;
    if (cp == '\r' || cp == '\n') k |= C_RN;
    return k;
}

/* End of the run of characters starting at i whose class satisfies the test. */
typedef bool (*cls_test)(unsigned k);
static bool t_l(unsigned k) { return k & C_L; }
static bool t_n(unsigned k) { return k & C_N; }
static bool t_s(unsigned k) { return k & C_S; }
static bool t_other(unsigned k) { return !(k & (C_L | C_N | C_S)); }
static bool t_rn(unsigned k) { return k & C_RN; }

static size_t run(cur c, size_t i, cls_test test, size_t max_chars) {
    size_t len;
    while (i < c.n && max_chars) {
        if (!test(cls_at(c, i, &len, NULL))) break;
        i += len;
        max_chars--;
    }
    return i;
}

static size_t contraction(cur c, bool icase) {
    if (c.n < 2 || c.s[0] != '\'') return 0;
    uint32_t a, b = 0;
    size_t la = tdm_tok_utf8_dec(c.s + 1, c.n - 1, &a), lb = 0;
    if (1 + la < c.n) lb = tdm_tok_utf8_dec(c.s + 1 + la, c.n - 1 - la, &b);
    if (icase) {
        if (a < 0x80) a |= 0x20;
        else if (a == 0x17F) a = 's'; /* LATIN SMALL LETTER LONG S folds to s */
        else if (a == 0x212A) a = 'k';
        if (b < 0x80 && b) b |= 0x20;
        else if (b == 0x17F) b = 's';
    }
    switch (a) {
    case 's': case 't': case 'm': case 'd': return 1 + la;
    case 'r': case 'v': return b == 'e' ? 1 + la + lb : 0;
    case 'l': return b == 'l' ? 1 + la + lb : 0;
    default: return 0;
    }
}

/* \s+(?!\S) then \s+, at a whitespace character */
static size_t spaces(cur c) {
    size_t len, end = run(c, 0, t_s, SIZE_MAX);
    if (end == c.n) return end;
    /* back off one character: the last whitespace must be followed by whitespace (or end) */
    size_t prev = 0, i = 0;
    while (i < end) {
        prev = i;
        cls_at(c, i, &len, NULL);
        i += len;
    }
    return prev > 0 ? prev : end;
}

static size_t match_gpt2(cur c) {
    size_t len, len2, k;
    if ((k = contraction(c, false))) return k;
    unsigned k0 = cls_at(c, 0, &len, NULL);
    unsigned k1 = len < c.n ? cls_at(c, len, &len2, NULL) : 0;
    bool sp = c.s[0] == ' ' && len < c.n;
    if (sp && (k1 & C_L)) return run(c, 1, t_l, SIZE_MAX);
    if (k0 & C_L) return run(c, 0, t_l, SIZE_MAX);
    if (sp && (k1 & C_N)) return run(c, 1, t_n, SIZE_MAX);
    if (k0 & C_N) return run(c, 0, t_n, SIZE_MAX);
    if (sp && t_other(k1)) return run(c, 1, t_other, SIZE_MAX);
    if (t_other(k0)) return run(c, 0, t_other, SIZE_MAX);
    return spaces(c);
}

static size_t match_llama3(cur c, size_t max_digits) {
    size_t len, len2, k;
    if ((k = contraction(c, true))) return k;
    unsigned k0 = cls_at(c, 0, &len, NULL);
    unsigned k1 = len < c.n ? cls_at(c, len, &len2, NULL) : 0;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (!(k0 & (C_RN | C_L | C_N)) && (k1 & C_L)) return run(c, len, t_l, SIZE_MAX);
    if (k0 & C_L) return run(c, 0, t_l, SIZE_MAX);
    /* \p{N}{1,3} (or \p{N}) */
    if (k0 & C_N) return run(c, 0, t_n, max_digits);
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if (c.s[0] == ' ' && len < c.n && t_other(k1)) return run(c, run(c, 1, t_other, SIZE_MAX), t_rn, SIZE_MAX);
    if (t_other(k0)) return run(c, run(c, 0, t_other, SIZE_MAX), t_rn, SIZE_MAX);
    /* \s*[\r\n]+: up to and including the last \r or \n of the whitespace run */
    size_t end = run(c, 0, t_s, SIZE_MAX), i = 0, last = 0;
    while (i < end) {
        unsigned kk = cls_at(c, i, &len, NULL);
        i += len;
        if (kk & C_RN) last = i;
    }
    if (last) return last;
    return spaces(c);
}

size_t tdm_tok_regex_match(tdm_tok_regex re, const unsigned char *s, size_t n) {
    cur c = {s, n};
    switch (re) {
    case TDM_TOK_RE_GPT2: return match_gpt2(c);
    case TDM_TOK_RE_LLAMA3: return match_llama3(c, 3);
    case TDM_TOK_RE_QWEN2: return match_llama3(c, 1);
    }
    return n;
}
