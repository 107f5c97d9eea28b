#!/usr/bin/env python3
"""Decoding arbitrary ids (stray byte-fallback tokens, invalid UTF-8, special tokens, in any
order) with tandem (libtandem through ctypes) and with Hugging Face tokenizers: the texts
must be equal, with and without skip_special. The tokenizer_random_decode ctest.

    python tests/tokenizers/test_random_decode.py LIBTANDEM.so TOKENIZER.json...
"""
import ctypes
import random
import sys

from tokenizers import Tokenizer


def main():
    lib = ctypes.CDLL(sys.argv[1])
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    lib.tdm_tokenizer_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
    lib.tdm_tokenizer_load.restype = vp
    lib.tdm_tokenizer_decode.argtypes = [vp, ctypes.POINTER(ctypes.c_int32), sz, ctypes.c_bool,
                                         ctypes.POINTER(vp), ctypes.POINTER(sz)]
    lib.tdm_tokenizer_decode.restype = vp
    lib.tdm_tokenizer_free.argtypes = [vp]
    lib.tdm_string_free.argtypes = [vp]
    lib.tdm_status_message.argtypes = [vp]
    lib.tdm_status_message.restype = ctypes.c_char_p
    failed = 0
    for path in sys.argv[2:]:
        hf = Tokenizer.from_file(path)
        tok = vp()
        st = lib.tdm_tokenizer_load(path.encode(), ctypes.byref(tok))
        if st:
            print(path, lib.tdm_status_message(st).decode())
            return 1
        n_ids = hf.get_vocab_size()
        rng = random.Random(19)
        bad = 0
        for _ in range(3000):
            n = rng.randint(0, 12)
            # any id, low ids (specials, byte tokens, single characters) more often
            ids = [rng.choice([rng.randrange(n_ids), rng.randrange(min(n_ids, 300))]) for _ in range(n)]
            arr = (ctypes.c_int32 * max(n, 1))(*ids)
            for skip in (False, True):
                want = hf.decode(ids, skip_special_tokens=skip)
                out, length = vp(), sz()
                st = lib.tdm_tokenizer_decode(tok, arr, n, skip, ctypes.byref(out), ctypes.byref(length))
                if st:
                    print(path, ids, lib.tdm_status_message(st).decode())
                    bad += 1
                    continue
                got = ctypes.string_at(out.value, length.value).decode("utf-8")
                lib.tdm_string_free(out)
                if got != want:
                    bad += 1
                    if bad <= 5:
                        print(f"{path}: ids {ids} skip {skip}:\n  got  {got!r}\n  want {want!r}")
        lib.tdm_tokenizer_free(tok)
        print(f"{path}: 3000 random id lists, {bad} decodes differ")
        failed += bad
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
