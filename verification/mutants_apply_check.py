#!/usr/bin/env python3
"""Checks that every mutant in verification/mutants.txt still applies: its original text occurs
exactly once in its file (what verification/mutants.sh needs), without running any layer.
A code change that moves a mutated line shows up here, in seconds, instead of as "NOT APPLIED"
in the next full mutation run. Exits 1 naming every mutant that no longer applies."""
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
problems, total = [], 0
for line in (root / "verification" / "mutants.txt").read_text().splitlines():
    if not line or line.startswith("#"):
        continue
    fields = line.split(" ;; ")
    if len(fields) != 6:
        problems.append(f"bad line ({len(fields)} fields): {line[:80]}")
        continue
    total += 1
    mid, paths, olds = fields[0], fields[1].split(","), fields[2].split(" &&& ")
    if len(paths) not in (1, len(olds)):
        problems.append(f"[{mid}] edit and file counts differ")
        continue
    for i, old in enumerate(olds):
        path = paths[i if len(paths) > 1 else 0]
        n = (root / path).read_text().count(old.replace("\\n", "\n"))
        if n != 1:
            problems.append(f"[{mid}] {path}: original text found {n} times: {old[:70]!r}")
for p in problems:
    print(p)
print(f"mutants: {total} listed, {total - len(problems)} apply" if not problems
      else f"mutants: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
