"""Build the Tiering page (``dist/tiering.js``) with npm, when its sources are newer than the built bundle.

Run before the provider is packaged (``setup.py``'s ``build_py``) and by ``scripts/setup.sh``; ``--force`` rebuilds.
An installed provider needs no Node.js: the wheel carries the bundle. npm's output is shown only when it fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WWW = Path(__file__).resolve().parent
BUNDLE = WWW / "dist" / "tiering.js"
INPUTS = ["package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"]


def _newest_input() -> float:
    files = [WWW / name for name in INPUTS] + [p for p in (WWW / "src").rglob("*") if p.is_file()]
    return max(p.stat().st_mtime for p in files)


def is_stale() -> bool:
    return not BUNDLE.exists() or BUNDLE.stat().st_mtime < _newest_input()


def _npm(npm: str, *args: str) -> None:
    done = subprocess.run([npm, *args], cwd=WWW, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"building the Tiering page failed: npm {' '.join(args)} exited with {done.returncode}")


def build(force: bool = False) -> None:
    if not force and not is_stale():
        return
    npm = shutil.which("npm")
    if npm is None:
        if BUNDLE.exists():
            print(f"npm not found: packaging the Tiering page as built before ({BUNDLE})", file=sys.stderr)
            return
        raise SystemExit(
            "building the Tiering page needs Node.js 18+ and npm (Debian: apt-get install nodejs npm); "
            "or install the provider from its wheel, which carries the built page"
        )
    installed = WWW / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < (WWW / "package-lock.json").stat().st_mtime:
        _npm(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
    _npm(npm, "run", "--silent", "build")
    print(f"built the Tiering page: {BUNDLE.relative_to(WWW.parents[2])} ({BUNDLE.stat().st_size:,} bytes)")


if __name__ == "__main__":
    build(force="--force" in sys.argv[1:])
