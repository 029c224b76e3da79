"""Copy the executables that `cargo --message-format=json` built to stable names.

usage: cargo test  --release --no-run --message-format=json | python3 gpu-bins.py tests DEST
       cargo bench --no-run --message-format=json           | python3 gpu-bins.py benches DEST
       (--exclude PACKAGE, repeatable, skips a package)

Names, with CRATE the crate's folder under rust/ (driver, ext):
  tests:   a library's unit tests -> CRATE-tests; tests/NAME.rs -> CRATE-NAME-tests;
           a binary's unit tests -> CRATE-bin-NAME-tests
  benches: benches/NAME.rs -> NAME-bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any


def package_name(msg: dict[str, Any]) -> str:
    # package_id: "path+file:///…/rust/driver#fastlaunch-driver@0.1.0" (or "…#0.1.0")
    pkg_id: str = msg["package_id"]
    frag = pkg_id.rsplit("#", 1)[-1]
    if "@" in frag:
        return frag.split("@", 1)[0]
    return Path(msg["manifest_path"]).parent.name


def stable_name(mode: str, msg: dict[str, Any]) -> str | None:
    target = msg["target"]
    kinds = set(target["kind"])
    crate = Path(msg["manifest_path"]).parent.name
    name = target["name"]
    if mode == "benches":
        return f"{name}-bench" if "bench" in kinds else None
    if not msg["profile"]["test"] or "bench" in kinds or "example" in kinds:
        return None
    if "test" in kinds:
        return f"{crate}-{name}-tests"
    if "bin" in kinds:
        return f"{crate}-bin-{name}-tests"
    return f"{crate}-tests"  # lib / cdylib / rlib unit tests


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["tests", "benches"])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--exclude", action="append", default=[], metavar="PACKAGE")
    args = ap.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)

    copied: dict[str, str] = {}
    ok = True
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") == "build-finished":
            ok = bool(msg.get("success"))
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if package_name(msg) in args.exclude:
            continue
        name = stable_name(args.mode, msg)
        if name is None:
            continue
        exe = msg["executable"]
        if copied.get(name, exe) != exe:
            print(f"gpu-bins: two executables want the name {name}", file=sys.stderr)
            return 1
        shutil.copy2(exe, args.dest / name)
        copied[name] = exe
        print(f"gpu-bins: {args.dest / name} <- {exe}", file=sys.stderr)
    if not ok:
        print("gpu-bins: cargo reported a failed build", file=sys.stderr)
        return 1
    if not copied:
        print(f"gpu-bins: cargo built no {args.mode} executables", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
