#!/usr/bin/env python3
"""Every command's --help lists and explains the same flags, and `tandem --help` lists every
command. A flag is *listed* when it appears in the usage lines (from "usage:" to the first
blank line) and *explained* when a line after them starts with it (after indentation). A
usage that ends in "[options]" or "[scenario options]" may explain more flags than it lists.
Usage: check_help.py TANDEM"""
import re
import subprocess
import sys

COMMANDS = ["run", "inspect", "conformance", "devices", "plan", "profile", "bench", "serve", "generate"]
FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def help_text(tandem, *args):
    r = subprocess.run([tandem, *args, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} --help exited {r.returncode}")
    return r.stdout


def check_command(tandem, cmd):
    lines = help_text(tandem, cmd).splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("usage:"))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    usage = " ".join(lines[start:end])
    listed = set(FLAG.findall(usage)) - {"--help"}
    explained = set()
    for l in lines[end:]:
        m = re.match(r"\s*(--[a-z][a-z0-9-]*)", l)
        if m:
            explained.add(m.group(1))
    problems = []
    for f in sorted(listed - explained):
        problems.append(f"{cmd}: {f} is in the usage but not explained")
    if "options]" not in usage:
        for f in sorted(explained - listed):
            problems.append(f"{cmd}: {f} is explained but not in the usage")
    return problems


def main():
    tandem = sys.argv[1]
    problems = []
    top = help_text(tandem)
    for cmd in COMMANDS:
        if not re.search(rf"^\s+{cmd}\b", top, re.M):
            problems.append(f"tandem --help does not list '{cmd}'")
        problems += check_command(tandem, cmd)
    for p in problems:
        print(p)
    print(f"help check: {len(COMMANDS)} commands, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
