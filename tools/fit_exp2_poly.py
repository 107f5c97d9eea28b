#!/usr/bin/env python3
"""The polynomial of the softmax rows' exponential (src/backends/cpu/k_softmax_row.c): 2^f on
[-1/2, 1/2] by a polynomial of degree N whose relative error is near its minimax, by Lawson's
iteration (weighted least squares on Chebyshev nodes, each node's weight multiplied by its
error until the error levels out), then the coefficients rounded to float32 and the error
measured again with float32 Horner steps on a fine grid.

    .venv/bin/python tools/fit_exp2_poly.py [N=5]

prints the coefficients (c0 first) as C float literals and the largest relative error;
degree 5 gives 2.1e-7, 6 gives 7.9e-8, 4 gives 2.7e-6.
"""
import sys

import numpy as np


def fit(deg, nodes=4000, iters=200):
    x = 0.5 * np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)
    y = np.exp2(x)
    w = np.ones_like(x)
    a = np.vander(x, deg + 1, increasing=True) / y[:, None]  # relative error: p(x) / 2^x - 1
    for _ in range(iters):
        c, *_ = np.linalg.lstsq(a * np.sqrt(w)[:, None], np.sqrt(w), rcond=None)
        e = np.abs(a @ c - 1.0)
        w = w * e
        w /= w.sum()
    return c.astype(np.float32)


def float32_error(c):
    f = np.linspace(-0.5, 0.5, 200001).astype(np.float32)
    p = np.full_like(f, c[-1])
    for k in range(len(c) - 2, -1, -1):  # one rounding a step, as an FMA gives
        p = (p.astype(np.float64) * f + np.float64(c[k])).astype(np.float32)
    return float(np.max(np.abs(p.astype(np.float64) / np.exp2(f.astype(np.float64)) - 1.0)))


def main():
    deg = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    c = fit(deg)
    for k, v in enumerate(c):
        print(f"c{k} = {float(v):.8e}f")
    print(f"largest relative error (float32 Horner): {float32_error(c):.3g}")


if __name__ == "__main__":
    main()
