#!/usr/bin/env python3
"""`kyverno test` and `gavel test` over the conformance corpus, side by side.

    e2e/cli-side-by-side.py [--repeats N] [--out DIR] [--corpus kyverno-cli]

`--corpus kyverno-cli` runs over Kyverno's own CLI tests instead (the
`test/cli` tree of the pinned Kyverno module, in Go's module cache once
`e2e/cluster.sh build kyverno` has fetched it), written as
`kyverno-cli-corpus.md` and `cli-corpus-rounds.json`: the kyverno-test.yaml
files Kyverno's developers wrote for every policy kind and test field.
Kyverno's summaries also go to tests/kyverno_cli_corpus.json, which
`cargo test --test integration -- kyverno_cli_corpus::` holds gavel to (its floor, the
number of directories that agree, only goes up).

Kyverno's CLI (kubectl-kyverno, built from its module by
`e2e/cluster.sh build kyverno`) and gavel's (`target/release/gavel`, built
here) run:

- over the whole corpus (../shared/conformance/kyverno-policies) in one
  invocation each, in alternating rounds (N, default 3): wall time of each,
  median, ratio;
- on each kyverno-test.yaml directory alone: the "Test Summary: P tests
  passed and F tests failed" line of each, compared. A file agrees when both
  print the same counts (an error that prints no summary counts as its own
  outcome); every disagreement is listed.

Writes DIR/kyverno-cli-side-by-side.md (with DIR/cli-notes.md as its
findings, when there is one) and DIR/cli-rounds.json (default DIR:
perf-results/<version>/kyverno-side-by-side); prints one last line
`cli-side-by-side: files=N agree=A wall_ratio=R`.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "conformance" / "kyverno-policies"
SUMMARY = re.compile(r"Test Summary: (\d+) tests? passed and (\d+) tests? failed")


def cache():
    import os

    return Path(os.environ.get("GAVEL_E2E_CACHE", Path.home() / ".cache" / "gavel-e2e"))


def run(cmd, timeout=600):
    started = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return time.monotonic() - started, out


def outcome(out):
    """(passed, failed) from the summary line, or the exit status when
    there is none (a load error)."""
    match = SUMMARY.search(out.stdout + out.stderr)
    if match:
        return int(match.group(1)), int(match.group(2))
    return f"no summary (exit {out.returncode})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--corpus", choices=["conformance", "kyverno-cli"], default="conformance")
    args = parser.parse_args()

    subprocess.run([str(REPO / "e2e/cluster.sh"), "build", "kyverno"], check=True,
                   stdout=sys.stderr)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "gavel"], check=True,
                   cwd=REPO)
    gavel = str(REPO / "target/release/gavel")
    kyverno = str(cache() / "bin/kubectl-kyverno")
    version = subprocess.run([gavel, "--version"], capture_output=True, text=True).stdout.split()[1]
    kyverno_version = re.search(
        r"Version: (\S+)", subprocess.run([kyverno, "version"], capture_output=True, text=True).stdout
    ).group(1)
    out_dir = Path(args.out) if args.out else REPO / f"perf-results/{version}/kyverno-side-by-side"
    out_dir.mkdir(parents=True, exist_ok=True)
    engines = {"gavel": [gavel, "test"], "kyverno": [kyverno, "test"]}
    corpus, report, rounds, title = CORPUS, "kyverno-cli-side-by-side.md", "cli-rounds.json", (
        "the conformance corpus", "`../shared/conformance/kyverno-policies`")
    if args.corpus == "kyverno-cli":
        modules = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        pinned = re.search(r"^KYVERNO_VERSION=(\S+)$", (REPO / "e2e/versions.env").read_text(),
                           re.M).group(1)
        corpus = Path(modules) / f"github.com/kyverno/kyverno@{pinned}" / "test" / "cli"
        report, rounds = "kyverno-cli-corpus.md", "cli-corpus-rounds.json"
        title = ("Kyverno's own CLI tests", f"`test/cli` of github.com/kyverno/kyverno@{pinned}")

    # The whole corpus, alternating.
    walls = {name: [] for name in engines}
    whole = {}
    for _ in range(args.repeats):
        for name, cmd in engines.items():
            wall, out = run(cmd + [str(corpus)], timeout=1800)
            walls[name].append(wall)
            whole[name] = outcome(out)
            print(f"cli-side-by-side: whole corpus, {name}: {wall:.2f}s {whole[name]}",
                  file=sys.stderr)

    # Each test file alone.
    files = sorted(p.parent for p in corpus.rglob("kyverno-test.yaml"))
    per_file = []
    for directory in files:
        row = {"dir": str(directory.relative_to(corpus))}
        for name, cmd in engines.items():
            _, out = run(cmd + [str(directory)])
            row[name] = outcome(out)
        row["agree"] = row["gavel"] == row["kyverno"]
        per_file.append(row)
    agree = sum(r["agree"] for r in per_file)
    median = {name: statistics.median(w) for name, w in walls.items()}
    ratio = median["kyverno"] / median["gavel"] if median["gavel"] else float("nan")

    (out_dir / rounds).write_text(json.dumps(
        {"walls": walls, "whole": whole, "per_file": per_file,
         "kyverno": kyverno_version, "gavel": version}, indent=2, default=str))
    lines = [
        f"# `gavel test` and `kyverno test` ({kyverno_version}) over {title[0]}",
        "",
        f"Made by `e2e/cli-side-by-side.py --corpus {args.corpus}`: {len(files)} "
        f"kyverno-test.yaml files of {title[1]}; raw figures in `{rounds}`.",
        "",
        "## The whole corpus in one invocation",
        "",
        "| | gavel | Kyverno |",
        "|---|---:|---:|",
        f"| wall time, median of {args.repeats} alternating rounds | {median['gavel']:.2f} s | "
        f"{median['kyverno']:.2f} s |",
        f"| rounds | {', '.join(f'{w:.2f}' for w in walls['gavel'])} | "
        f"{', '.join(f'{w:.2f}' for w in walls['kyverno'])} |",
        f"| test summary (passed, failed) | {whole['gavel']} | {whole['kyverno']} |",
        "",
        f"Kyverno takes **{ratio:.1f}×** gavel's time.",
        "",
        "## Each file alone",
        "",
        f"{agree} of {len(files)} files print the same summary with both.",
        "",
    ]
    disagreements = [r for r in per_file if not r["agree"]]
    if disagreements:
        lines += ["| file | gavel (passed, failed) | Kyverno (passed, failed) |", "|---|---|---|"]
        lines += [f"| `{r['dir']}` | {r['gavel']} | {r['kyverno']} |" for r in disagreements]
        lines.append("")
    if args.corpus == "kyverno-cli":
        # Kyverno's summaries, for tests/kyverno_cli_corpus.rs; its floor
        # (how many agree) only goes up.
        fixture = REPO / "tests/kyverno_cli_corpus.json"
        previous = json.loads(fixture.read_text())["floor"] if fixture.exists() else 0
        fixture.write_text(json.dumps({
            "kyverno": kyverno_version,
            "floor": max(previous, agree),
            "files": {r["dir"]: r["kyverno"] for r in per_file},
        }, indent=1, sort_keys=True) + "\n")
    notes = out_dir / ("cli-notes.md" if args.corpus == "conformance" else "cli-corpus-notes.md")
    if notes.exists():
        lines += ["## Findings", "", notes.read_text().strip(), ""]
    (out_dir / report).write_text("\n".join(lines))
    print(f"cli-side-by-side: files={len(files)} agree={agree} wall_ratio={ratio:.1f}")


if __name__ == "__main__":
    main()
